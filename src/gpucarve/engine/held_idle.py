"""Running work that holds GPUs idle, judged at the start of a cycle by its queue's idleness
rule (core.held_idle): warned work goes first among the victims reclaim and preemption take;
reclaimable work may be evicted for any waiting work that needs its GPUs (`Preemptor.
idle_candidates`). A workload is reclaimable only when its queue borrows what it holds (or the
rule reclaims within quota too) and it is preemptible; otherwise it stays warned, and the
message says why.
"""

from __future__ import annotations

from gpucarve.core.held_idle import IdleRule, IdleStage
from gpucarve.core.workload import RunningWorkload
from gpucarve.engine.decisions import HeldIdle
from gpucarve.engine.quota import Quotas


def borrows_what_it_holds(quotas: Quotas, rw: RunningWorkload) -> bool:
    """Whether `rw`'s queue uses beyond its nominal quota in something `rw` holds."""
    q = rw.workload.queue
    return any(quotas.borrows(q, f) for f in sorted({p.flavor for p in rw.pods if p.flavor}))


def may_reclaim(quotas: Quotas, rule: IdleRule, rw: RunningWorkload) -> bool:
    """Whether the rule lets idle `rw` be evicted now (its stage aside)."""
    if not rw.workload.preemptible or rule.reclaim_after_s is None:
        return False
    return rule.within_quota or borrows_what_it_holds(quotas, rw)


def judge(
    rules: dict[str, IdleRule],
    idle_since: dict[str, int],
    running: dict[str, RunningWorkload],
    quotas: Quotas,
    now: int,
) -> dict[str, HeldIdle]:
    """Workload id -> its standing, for running work idle past its warning window."""
    out: dict[str, HeldIdle] = {}
    for wid, since in sorted(idle_since.items()):
        rw = running.get(wid)
        rule = rules.get(rw.workload.queue) if rw is not None else None
        if rw is None or rule is None or rw.terminating:
            continue
        stage = rule.stage(since, now)
        if stage is IdleStage.ACTIVE:
            continue
        out[wid] = _standing(quotas, rule, rw, since, now)
    return out


def _standing(
    quotas: Quotas, rule: IdleRule, rw: RunningWorkload, since: int, now: int
) -> HeldIdle:
    w = rw.workload
    head = (
        f"idle: its GPUs below {rule.activity_below:g}% activity for {now - since}s "
        f"(queue {w.queue}'s idleness rule)"
    )
    if not may_reclaim(quotas, rule, rw):
        if rule.reclaim_after_s is None:
            why = "its queue's rule only warns (idleness.reclaimAfterSeconds: null)"
        elif not w.preemptible:
            why = "it is not preemptible, so it is only warned"
        else:
            why = (
                "it runs within its queue's nominal quota, so it is only warned "
                "(idleness.withinQuota: warn)"
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
