"""`simulate --recommend --ray`: the search's replays as tasks on a real Ray cluster (one
started on this machine for the run), with the same choice and figures as in this process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from gpucarve.cli.main import app


def _recommend(tmp_path: Path, *extra: str) -> tuple[dict[str, Any], str]:
    args = ["simulate", "--compare", "gpucarve", "--days", "0.25", "--load", "2", "--recommend",
            "--judge-seeds", "1", "--json", "--out", str(tmp_path), *extra]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["recommendation"], result.stderr


def test_the_search_on_ray_chooses_as_the_search_in_this_process(tmp_path: Path) -> None:
    here, _ = _recommend(tmp_path / "here", "--jobs", "1")
    on_ray, said = _recommend(tmp_path / "ray", "--ray", "local")
    assert on_ray == here
    assert here["replays"] > len(here["path"])  # it searched: more than the path was replayed
    assert "recommend: round 1:" in said


def test_a_ray_address_with_no_cluster_is_refused_with_the_fix(tmp_path: Path) -> None:
    args = ["simulate", "--compare", "gpucarve", "--days", "0.1", "--recommend",
            "--ray", "127.0.0.1:9", "--out", str(tmp_path)]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "--ray [ray-unavailable]" in result.output and "fix:" in result.output
