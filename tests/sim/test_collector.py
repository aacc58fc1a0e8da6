"""The simulator makes full garbage collections rarer while it runs, and puts the collector's
thresholds back as they were after, also when the run raises."""

from __future__ import annotations

import gc

import pytest

from gpucarve.sim.run.runner import FULL_COLLECTION_EVERY, Simulator
from tests.engine.builders import policy, pool, queue, workload


def test_full_collections_are_rarer_during_a_run_and_thresholds_come_back() -> None:
    p = policy(
        pools=[pool("h", "H100-SXM5-80GB", 1, 8)],
        queues=[queue("a", {"h100-full": {"nominal": 8}})],
    )
    before = gc.get_threshold()
    gc.set_threshold(before[0], before[1], 10)
    try:
        seen: list[tuple[int, int, int]] = []
        sim = Simulator(p, [workload(p, "w", "a", gpus=1, duration=60)])
        sim.run(progress=lambda now, done: seen.append(gc.get_threshold()))
        assert seen and all(t[2] == FULL_COLLECTION_EVERY for t in seen)
        assert gc.get_threshold()[2] == 10

        def fail(now: int, done: int) -> None:
            raise RuntimeError("stop")

        sim = Simulator(p, [workload(p, "w", "a", gpus=1, duration=60)])
        with pytest.raises(RuntimeError):
            sim.run(progress=fail)
        assert gc.get_threshold()[2] == 10
    finally:
        gc.set_threshold(*before)
