"""The synthetic teams `gpucarve simulate` makes from a policy's queues (no trace given): each
flavor a queue has nominal quota for gets job kinds, whether the quota is keyed by the flavor
or by a GPU unit (every flavor of one model, in parts of a GPU). A unit's quota once reached
the flavor table as if it were a flavor's name and ended the run with a KeyError."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpucarve.cli.main import app
from gpucarve.sim.traces.policy_scenario import scenario_for
from tests.engine.builders import HEAD, policy, pool, queue

POOLS = [
    pool("inf", "A100-80GB", 2, 2, "mig", mig={"layout": {"3g.40gb": 2}}),
    pool("train", "H100-SXM5-80GB", 1, 8),
]


def test_a_gpu_unit_quota_gets_job_kinds_for_each_flavor_of_its_model() -> None:
    p = policy(
        pools=POOLS,
        queues=[
            queue("serve", {"a100": {"nominal": 2}}),
            queue("train", {"h100-full": {"nominal": 8}}),
        ],
    )
    teams = {t.queue: t for t in scenario_for(p, 1.0).teams}
    assert [k.name for k in teams["serve"].kinds] == ["serve-a100-mig-3g.40gb"]
    assert {k.name for k in teams["train"].kinds} == {f"train-h100-full-{n}" for n in (1, 2, 4, 8)}
    # 2 GPUs of the unit buy 4 instances of 3g.40gb (half a GPU each): the slices offered per
    # hour per slice of nominal quota are those of the flavor-keyed queue (8 whole GPUs; its
    # jobs take 3.75 GPUs on average, the serving ones 1.5 instances)
    serve = teams["serve"].arrivals_per_hour * 1.5 / 4
    train = teams["train"].arrivals_per_hour * 3.75 / 8
    assert serve == pytest.approx(train, rel=1e-9)


def test_simulate_runs_a_policy_whose_queue_has_a_gpu_unit_quota(tmp_path: Path) -> None:
    doc = {**HEAD, "pools": POOLS, "queues": [queue("serve", {"a100": {"nominal": 2}})]}
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(doc))
    args = ["simulate", "--policy", str(path), "--days", "1", "--json", "--out", str(tmp_path)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    results = json.loads(result.stdout)["results"]
    assert results["gpucarve"]["pools"]["inf"]["allocation"] > 0
