"""Consolidation in the simulator: a moved workload goes back to its queue, starts again at
once elsewhere and pays its restart (its work since it started is done again); the waiting
gang starts when it is moved. The engine's side: tests/engine/test_consolidate.py."""

from __future__ import annotations

from gpucarve.core.policy import Policy
from gpucarve.sim.run.metrics import summarize
from gpucarve.sim.run.runner import Simulator
from tests.engine.builders import policy, pool, queue, workload


def _policy(moves: int | None) -> Policy:
    return policy(
        pools=[pool("train", "H100-SXM5-80GB", 2, 8)],
        queues=[queue("r", {"h100-full": {"nominal": 16}})],
        scheduling={"minRuntimeSeconds": 0, "consolidateMaxMoves": moves},
    )


def _run(moves: int | None) -> tuple[dict[str, list[tuple[int, int, str]]], dict[str, object]]:
    """a runs 4 GPUs on one node from 0 s; x beside it ends at 500 s; c runs 4 GPUs on the
    other node from 100 s: when the 8-GPU gang comes at 600 s, 4 GPUs are free on each."""
    p = _policy(moves)
    ws = [
        workload(p, "a", "r", gpus=4, duration=20_000),
        workload(p, "x", "r", gpus=4, duration=500),
        workload(p, "c", "r", gpus=4, submit=100, duration=3_000),
        workload(p, "big", "r", gpus=8, submit=600, duration=1_000),
    ]
    result = Simulator(p, ws).run()
    runs: dict[str, list[tuple[int, int, str]]] = {}
    for iv in result.intervals:
        runs.setdefault(iv.workload, []).append((iv.start, iv.end, iv.outcome))
    s = summarize(result, {}, (0, result.end))
    return runs, s


def test_a_moved_workload_starts_again_at_once_and_does_its_work_again() -> None:
    runs, s = _run(2)
    # the gang starts as it arrives: c (the newer, cheaper to move) was moved for it
    (big,) = runs["r/big"]
    assert big[0] == 600 and big[2] == "completed"
    first, second = sorted(runs["r/c"])
    assert first == (100, 600, "evicted")
    # started again within the simulator's retry tick, and ran its whole 3,000 s again
    assert 600 <= second[0] <= 700 and second[1] - second[0] == 3_000, second
    assert second[2] == "completed"
    # what c had done (4 GPUs × 500 s) is work done again, and is counted as lost
    assert s["gpu_hours_redone"] == round(4 * 500 / 3600, 2)
    assert s["preemptions"] == 1


def test_without_consolidation_the_gang_waits_for_the_first_end() -> None:
    runs, s = _run(None)
    (big,) = runs["r/big"]
    assert big[0] == 100 + 3_000  # c's end frees its node
    assert len(runs["r/c"]) == 1 and s["gpu_hours_redone"] == 0
