"""Queue statuses are worked out at most once a second by the reporter's injected clock (under
load the loop cycles many times a second), and always for a new policy; from what the engine
holds after the cycle they are those a pass over every running workload gives."""

from __future__ import annotations

import ssl
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gpucarve.engine import run_cycle
from gpucarve.kube.api.client import Client
from gpucarve.kube.scheduler import reporter as reporter_module
from gpucarve.kube.scheduler.reporter import QUEUE_STATUS_EVERY_S, Reporter
from gpucarve.kube.view.cluster_view import View
from tests.engine.builders import policy, pool, queue, snapshot, workload

P = policy(
    pools=[pool("train", "H100-SXM5-80GB", 1, 8)],
    queues=[queue("a", {"h100-full": {"nominal": 8}})],
)


def test_queue_statuses_are_worked_out_at_most_once_a_second(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    worked: list[Any] = []

    def statuses(*args: Any) -> dict[str, dict[str, Any]]:
        worked.append(args)
        return {}  # nothing to write: no request leaves the test

    monkeypatch.setattr(reporter_module, "queue_statuses", statuses)
    now = [datetime(2026, 12, 4, tzinfo=UTC)]
    # a client no request is ever sent through
    client = Client("https://127.0.0.1:9", ssl.create_default_context(), {})
    r = Reporter(client, lambda: now[0])
    try:
        s = snapshot(P, [workload(P, "w", "a", gpus=1)])
        view = View(s)
        result = run_cycle(s, 0)

        def cycle_at(seconds: float, pol: Any = P) -> None:
            now[0] = datetime(2026, 12, 4, tzinfo=UTC) + timedelta(seconds=seconds)
            r.queues(pol, view, result, {})

        cycle_at(0)
        cycle_at(0.5)
        cycle_at(0.99)
        assert len(worked) == 1
        cycle_at(QUEUE_STATUS_EVERY_S)
        assert len(worked) == 2
        # a new policy is never kept waiting
        other = policy(
            pools=[pool("train", "H100-SXM5-80GB", 1, 8)],
            queues=[queue("a", {"h100-full": {"nominal": 4}})],
        )
        cycle_at(QUEUE_STATUS_EVERY_S + 0.1, other)
        assert len(worked) == 3 and worked[-1][0] is other
    finally:
        r.shutdown()


def test_statuses_from_what_the_engine_holds_are_those_of_a_pass_over_what_runs() -> None:
    """The loop hands the reporter what its engine holds after the cycle (`Engine.held`): the
    statuses must be those worked out from the running workloads and the result, through
    admissions, evictions (the stream borrows and reclaims in a cohort) and completions."""
    import random

    from gpucarve.core.snapshot import Snapshot
    from gpucarve.engine import Engine
    from gpucarve.engine.apply import apply, finish
    from gpucarve.kube.scheduler.queue_status import queue_statuses
    from tests.engine.builders import mixed_arrivals, mixed_policy

    p = mixed_policy()
    rng = random.Random(3)
    engine, s = Engine(rebuilt_views=True), snapshot(p)
    evicted = borrowed = 0
    for step in range(20):
        s = Snapshot(p, s.cluster, s.running, (*s.pending, *mixed_arrivals(p, rng, step)))
        result = engine.run_cycle(s, step * 10)
        plain = queue_statuses(p, s.running, result)
        assert queue_statuses(p, s.running, result, (), engine.held()) == plain
        evicted += len(result.evictions)
        borrowed += sum(1 for q in plain.values() if q["borrowed"])
        s = apply(s, result)
        s = finish(s, *[rw.workload.id for rw in s.running if rng.random() < 0.3])
    assert evicted and borrowed
