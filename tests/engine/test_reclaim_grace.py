"""Reclaim's grace (scheduling.reclaimGraceSeconds): borrowed work expected to end within the
grace is not thrown away; the reclaimer waits for its end, and its reason says so. Work
expected to run past the grace, or a reclaimer that has waited the grace out, is reclaimed
as before. Only a deadline or a learned (or declared) runtime counts as an expected end."""

from __future__ import annotations

import dataclasses
from typing import Any

from gpucarve.core.snapshot import Snapshot
from gpucarve.engine.decisions import Plugin
from tests.engine.builders import cycle, policy, pool, queue, snapshot, submit, workload


def _policy(grace: int | None) -> Any:
    sched: dict[str, Any] = {"minRuntimeSeconds": 0, "reclaimGraceSeconds": grace}
    return policy(
        pools=[pool("train", "H100-SXM5-80GB", 1, 8)],
        cohorts=[{"name": "lab"}],
        queues=[
            queue("owner", {"h100-full": {"nominal": 8}}, cohort="lab"),
            queue("borrower", {"h100-full": {"nominal": 0, "borrowingLimit": 8}}, cohort="lab"),
        ],
        scheduling=sched,
    )


def _borrowing(p: Any, deadline: int | None) -> Snapshot:
    """The borrower runs all 8 GPUs from 0 s (its deadline, if any, bounds its end)."""
    w = workload(p, "long", "borrower", gpus=8)
    if deadline is not None:
        w = dataclasses.replace(w, runtime_limit_s=deadline)
    _, s = cycle(snapshot(p, [w]), 0)
    return submit(s, workload(p, "mine", "owner", gpus=8, submit=100))


def test_work_about_to_end_is_waited_for() -> None:
    p = _policy(grace=3600)
    result, _ = cycle(_borrowing(p, deadline=600), 100)
    assert not result.evictions and not result.admissions
    reason = result.pending_reason("owner/mine")
    assert reason is not None and reason.plugin is Plugin.RECLAIM_GRACE
    assert "borrower/long" in reason.message and "expected to end in 500s" in reason.message
    assert "by its deadline" in reason.message


def test_without_grace_or_past_it_reclaim_evicts() -> None:
    for p, deadline, now in (
        (_policy(grace=None), 600, 100),  # no grace: as before
        (_policy(grace=3600), 7200, 100),  # it would run past the grace
        (_policy(grace=3600), None, 100),  # nothing says when it ends (the default runtime)
        (_policy(grace=3600), 600, 3700),  # the reclaimer waited the grace out
    ):
        s = _borrowing(p, deadline)
        result, _ = cycle(s, now)
        assert [e.workload for e in result.evictions] == ["borrower/long"], (deadline, now)
        assert result.admitted_ids() == ["owner/mine"]


def test_gpus_left_free_while_reclaim_waits_are_counted_for_that() -> None:
    p = _policy(grace=3600)
    w = dataclasses.replace(workload(p, "most", "borrower", gpus=6), runtime_limit_s=600)
    _, s = cycle(snapshot(p, [w]), 0)
    s = submit(s, workload(p, "mine", "owner", gpus=8, submit=100))
    result, _ = cycle(s, 100)
    assert not result.evictions and not result.admissions
    assert [(i.cause.value, i.slices) for i in result.idle if i.slices] == [("reclaim-grace", 2)]
