"""The demand bound: a pool's work replayed on a perfectly packed pot of its GPUs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpucarve.cli.main import app
from gpucarve.cli.simulate_cmd import _scenario, _synthetic_workloads
from gpucarve.config.policy_build import load_policy
from gpucarve.sim.recommend import demand_bound as demand_bound_module
from gpucarve.sim.recommend.demand_bound import ORDERS, demand_bound, wait_alone_p95
from tests.engine.builders import policy, pool, queue, workload
from tests.paths import BUILTIN


def test_work_that_does_not_fit_waits_and_later_work_backfills() -> None:
    p = policy(
        pools=[pool("train", "H100-SXM5-80GB", 1, 2), pool("inf", "A100-80GB", 1, 1, "mig",
                                                           mig={"layout": {"3g.40gb": 2}})],
        queues=[queue("q", {"h100-full": {"nominal": 2}, "a100": {"nominal": 1}})],
    )  # fmt: skip
    ws = [
        workload(p, "both", "q", gpus=2, duration=100),  # fills the pot until 100
        workload(p, "one", "q", gpus=1, duration=100),  # waits, runs 100..200
        workload(p, "late", "q", gpus=1, submit=150, duration=400),  # backfills at 150
        # three 3g.40gb (half a GPU each) on one A100: two at once, the third from 50
        workload(p, "m", "q", mig="3g.40gb", pods=3, min_pods=1, duration=50),
    ]
    bound = demand_bound(p, ws, (0, 300))
    # train: 2 × 100 + 1 × 100 + 1 × 150 (clipped at 300) GPU-seconds over 300 s
    assert bound["train"] == round((200 + 100 + 150) / 300, 2)
    # a pod set is one job: three 3g.40gb need 1.5 GPUs and never fit the one A100
    assert bound["inf"] == 0.0
    ws[-1] = workload(p, "m", "q", mig="3g.40gb", pods=2, duration=50)
    charge = 2 * 0.496  # two 3g.40gb, each its dominant share of the A100
    assert abs(demand_bound(p, ws, (0, 300))["inf"] - round(charge * 50 / 300, 2)) < 0.011


def _two_gpus() -> Any:
    return policy(
        pools=[pool("train", "H100-SXM5-80GB", 1, 2)],
        queues=[queue("q", {"h100-full": {"nominal": 2}}),
                queue("o", {"h100-full": {"nominal": 0}})],
    )  # fmt: skip


def test_a_queue_alone_waits_only_for_its_own_work_in_the_best_order() -> None:
    p = _two_gpus()
    ws = [
        workload(p, "long", "q", gpus=2, duration=1000),  # holds the pot until 1000
        # twenty 1-GPU jobs at 10 wait for "long" whatever the order, then start two by two
        *(workload(p, f"s{i}", "q", gpus=1, submit=10, duration=100) for i in range(20)),
        workload(p, "other", "o", gpus=2, duration=10_000),  # another queue's: gone
    ]
    p95 = wait_alone_p95(p, ws, "q", end=100_000)
    # 21 workloads; nearest-rank p95 is the 20th wait sorted: pairs of the 20 start at 1000,
    # 1100, ..., 1900, so the 20th wait is 1900 - 10 (the first, "long", waits 0)
    assert p95 == 1890.0
    # another queue's work does not count
    assert wait_alone_p95(p, ws[:-1], "q", end=100_000) == p95
    assert wait_alone_p95(p, ws, "nobody", end=100_000) is None


def test_shortest_first_can_beat_arrival_order(monkeypatch: pytest.MonkeyPatch) -> None:
    p = _two_gpus()
    # a 2-GPU job that runs long arrives just before many short ones: in arrival order all
    # of them wait for it; shortest first starts the short ones first
    ws = [
        workload(p, "first", "q", gpus=2, duration=10),
        workload(p, "big", "q", gpus=2, submit=1, duration=10_000),
        *(workload(p, f"s{i}", "q", gpus=1, submit=2, duration=10) for i in range(40)),
    ]
    p95 = wait_alone_p95(p, ws, "q", end=1_000_000)
    assert p95 is not None and p95 < 1000
    monkeypatch.setattr(demand_bound_module, "ORDERS", {"arrival": ORDERS["arrival"]})
    # in arrival order the short ones wait for "big" (10 .. 10,010), then go two by two: the
    # 40th of the 42 waits sorted is the 19th pair's, 10,010 + 18 × 10 - 2
    assert wait_alone_p95(p, ws, "q", end=1_000_000) == 10_188


def test_waits_are_counted_to_the_end_and_work_too_large_never_starts() -> None:
    p = _two_gpus()
    ws = [workload(p, "huge", "q", gpus=2, pods=2, duration=10)]  # 4 GPUs in one pod set
    assert wait_alone_p95(p, ws, "q", end=500) == 500.0


def test_no_scheduler_the_simulator_runs_waits_less_than_a_queue_alone(tmp_path: Path) -> None:
    """The claim `simulate --recommend` prints on it: on the example at load 2, every queue's
    wait p95 under each scheduler is at least what its work alone with its pools would wait."""
    seed, days, load = 43, 1.0, 2.0
    loaded = load_policy(BUILTIN / "three-teams.yaml", [])
    workloads, _ = _synthetic_workloads(
        loaded.policy, _scenario(loaded.policy, days, load, "t"), days, seed
    )
    end = max(w.submit_time for w in workloads) + 1
    alone = {
        q.name: wait_alone_p95(loaded.policy, workloads, q.name, end) for q in loaded.policy.queues
    }
    assert alone["production"] is not None and alone["production"] > 0  # a figure with teeth
    args = ["simulate", "--seed", str(seed), "--days", str(days), "--load", str(load),
            "--compare", "kube-default", "--compare", "gpucarve",
            "--json", "--out", str(tmp_path)]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    for name, run in json.loads(result.stdout)["results"].items():
        for q, least in alone.items():
            assert least is not None
            assert run["teams"][q]["wait_p95_s"] >= least, (name, q, least)
