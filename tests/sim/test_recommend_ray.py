"""`simulate --recommend --ray`: the search's replays as tasks on a real Ray cluster (one
started on this machine for the run), with the same choice and figures as in this process."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from gpucarve.cli.main import app
from tests.sim.test_recommend_search import recommend


def test_the_search_on_ray_chooses_as_the_search_in_this_process(tmp_path: Path) -> None:
    here, _ = recommend(tmp_path / "here", "--jobs", "1", days=0.25)
    on_ray, said = recommend(tmp_path / "ray", "--ray", "local", days=0.25)
    assert on_ray == here
    assert here["replays"] > len(here["path"])  # it searched: more than the path was replayed
    assert "recommend: round 1:" in said


def test_a_ray_address_with_no_cluster_is_refused_with_the_fix(tmp_path: Path) -> None:
    args = ["simulate", "--compare", "gpucarve", "--days", "0.1", "--recommend",
            "--ray", "127.0.0.1:9", "--out", str(tmp_path)]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "--ray [ray-unavailable]" in result.output and "fix:" in result.output
