"""A queue's bound on how long its work within nominal quota waits for quota it lent
(`queues[].reclaimWaitSeconds`): reclaim sparing and reclaim grace, which make a lender wait
so that less borrowed work is thrown away, hold its reclaims off no longer than the bound (0:
not at all), and the reason names the bound; other queues keep the scheduling settings'."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from gpucarve.engine.decisions import Plugin
from tests.engine.builders import cycle, policy, pool, queue, snapshot, submit, workload


def _policy(bound: int | None, **sched: Any) -> Any:
    extra = {} if bound is None else {"reclaimWaitSeconds": bound}
    return policy(
        pools=[pool("train", "H100-SXM5-80GB", 1, 8)],
        cohorts=[{"name": "lab"}],
        queues=[
            queue("owner", {"h100-full": {"nominal": 8}}, cohort="lab", **extra),
            queue("borrower", {"h100-full": {"nominal": 0, "borrowingLimit": 8}}, cohort="lab"),
        ],
        scheduling={"minRuntimeSeconds": 0, **sched},
    )


def _reclaim(p: Any, now: int, gpus: int = 1, deadline: int | None = None) -> Any:
    """The borrower runs an 8-GPU gang from 0 s; the owner asks `gpus` at 100 s."""
    w = workload(p, "gang", "borrower", gpus=4, pods=2)
    if deadline is not None:
        w = dataclasses.replace(w, runtime_limit_s=deadline)
    _, s = cycle(snapshot(p, [w]))
    result, _ = cycle(submit(s, workload(p, "mine", "owner", gpus=gpus, submit=100)), now)
    return result


SPARING = {"reclaimLargeVictimRatio": 4, "reclaimLargeVictimAfterSeconds": 3600}


@pytest.mark.parametrize(("bound", "now", "evicted"), [
    (None, 500, False),  # the setting's hour: still spared
    (300, 500, True),  # waited 400 s, past the queue's 300
    (300, 300, False),  # waited 200 s, within it
    (0, 100, True),  # never held off
])  # fmt: skip
def test_sparing_holds_a_queues_reclaim_off_no_longer_than_its_bound(
    bound: int | None, now: int, evicted: bool
) -> None:
    result = _reclaim(_policy(bound, **SPARING), now)
    assert bool(result.evictions) is evicted
    if not evicted:
        reason = result.pending_reason("owner/mine")
        assert reason is not None
        setting = "reclaimLargeVictimAfterSeconds" if bound is None else "reclaimWaitSeconds"
        assert "reclaim spares borrower/gang" in reason.message and setting in reason.message


@pytest.mark.parametrize(("bound", "now", "evicted"), [
    (None, 500, False),  # expected to end at 600 s, within the hour's grace: waited for
    (300, 500, True),  # the owner may wait 300 s: past it
    (0, 100, True),
])  # fmt: skip
def test_grace_holds_a_queues_reclaim_off_no_longer_than_its_bound(
    bound: int | None, now: int, evicted: bool
) -> None:
    result = _reclaim(_policy(bound, reclaimGraceSeconds=3600), now, gpus=8, deadline=600)
    assert bool(result.evictions) is evicted
    if not evicted:
        reason = result.pending_reason("owner/mine")
        assert reason is not None and reason.plugin is Plugin.RECLAIM_GRACE
        assert "scheduling.reclaimGraceSeconds" in reason.message


def test_the_bound_names_itself_in_the_grace_reason() -> None:
    result = _reclaim(_policy(450, reclaimGraceSeconds=3600), 300, gpus=8, deadline=600)
    reason = result.pending_reason("owner/mine")
    assert reason is not None and "queue owner's reclaimWaitSeconds" in reason.message
    assert "up to 450s" in reason.message
