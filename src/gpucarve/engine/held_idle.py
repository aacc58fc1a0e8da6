"""Running work that holds GPUs idle, judged at the start of a cycle by its queue's idleness
rule (core.held_idle): warned work goes first among the victims reclaim and preemption take;
reclaimable work may be evicted for any waiting work that needs its GPUs (`Preemptor.
idle_candidates`). A workload is reclaimable only when its queue borrows what it holds (or the
rule reclaims within quota too: `borrowed_part` says which of a queue's work that is) and it
is preemptible; otherwise it stays warned, and the message says why.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpucarve.core.amounts import QuotaKey
from gpucarve.core.held_idle import IdleRule, IdleStage
from gpucarve.core.workload import RunningWorkload
from gpucarve.engine.decisions import HeldIdle
from gpucarve.engine.quota import Quotas


def borrowed_part(quotas: Quotas, running: Iterable[RunningWorkload]) -> set[str]:
    """The workloads of one queue that make up what it borrows: its work in the order it was
    submitted fills its nominal quota first (the earliest work holds the guarantee), and a
    workload that takes the queue past its nominal quota in a key it holds is borrowed.
    Submission, not start: when a kubelet starts pods is its own business, and a workload's
    standing must not flip with it."""
    used: dict[QuotaKey, int] = {}
    out = set()
    order = sorted(running, key=lambda r: (r.workload.submit_time, r.start_time, r.workload.id))
    for rw in order:
        q = rw.workload.queue
        keys = sorted({k for p in rw.pods if p.flavor for k, _ in quotas.keys(q, p.flavor)})
        over = False
        for k in keys:
            used[k] = used.get(k, 0) + quotas.held(q, rw.pods, k)
            over = over or used[k] > quotas.nominal(q, k)
        if over:
            out.add(rw.workload.id)
    return out


def may_reclaim(rule: IdleRule, rw: RunningWorkload, borrowed: set[str]) -> bool:
    """Whether the rule lets idle `rw` be evicted (its stage aside)."""
    if not rw.workload.preemptible or rule.reclaim_after_s is None:
        return False
    return rule.within_quota or rw.workload.id in borrowed


def judge(
    rules: dict[str, IdleRule],
    idle_since: dict[str, int],
    running: dict[str, RunningWorkload],
    quotas: Quotas,
    now: int,
) -> dict[str, HeldIdle]:
    """Workload id -> its standing, for running work idle past its warning window."""
    out: dict[str, HeldIdle] = {}
    borrowed: dict[str, set[str]] = {}  # queue -> its borrowed part (worked out once)
    for wid, since in sorted(idle_since.items()):
        rw = running.get(wid)
        rule = rules.get(rw.workload.queue) if rw is not None else None
        if rw is None or rule is None or rw.terminating:
            continue
        stage = rule.stage(since, now)
        if stage is IdleStage.ACTIVE:
            continue
        q = rw.workload.queue
        if q not in borrowed:
            mine = [r for r in running.values() if r.workload.queue == q]
            borrowed[q] = borrowed_part(quotas, mine)
        out[wid] = _standing(rule, rw, since, now, borrowed[q])
    return out


def _standing(
    rule: IdleRule, rw: RunningWorkload, since: int, now: int, borrowed: set[str]
) -> HeldIdle:
    w = rw.workload
    head = (
        f"idle: its GPUs below {rule.activity_below:g}% activity for {now - since}s "
        f"(queue {w.queue}'s idleness rule)"
    )
    if not may_reclaim(rule, rw, borrowed):
        if rule.reclaim_after_s is None:
            why = "its queue's rule only warns (idleness.reclaimAfterSeconds: null)"
        elif not w.preemptible:
            why = "it is not preemptible, so it is only warned"
        else:
            why = (
                "it runs within its queue's nominal quota (the queue's earliest work holds "
                "it), so it is only warned (idleness.withinQuota: warn)"
            )
        return HeldIdle(w.id, w.queue, IdleStage.WARNED, since, None, f"{head}; {why}")
    assert rule.reclaim_after_s is not None
    at = since + rule.reclaim_after_s
    if at <= now:
        msg = f"{head}; work waiting for its GPUs may reclaim it now"
        return HeldIdle(w.id, w.queue, IdleStage.RECLAIMABLE, since, None, msg)
    msg = (
        f"{head}; it goes first if reclaim or preemption needs room, and work waiting for its "
        f"GPUs may reclaim it in {at - now}s (idleness.reclaimAfterSeconds)"
    )
    return HeldIdle(w.id, w.queue, IdleStage.WARNED, since, at, msg)
