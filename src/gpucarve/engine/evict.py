"""Making room by eviction inside a cycle: reclaim (a queue within its nominal quota takes back
what its cohort lent out) and priority preemption, after placement and a repartition could not
serve a workload. Victims are chosen by `preemption.Preemptor`; an admission made earlier in
the same cycle is withdrawn rather than evicted (its pods never started)."""

from __future__ import annotations

from collections.abc import Sequence

from gpucarve.core.amounts import Demand
from gpucarve.core.runtime import WHENCE
from gpucarve.core.workload import Workload
from gpucarve.engine.decisions import Cause, Eviction, Pending, PendingReason, Plugin, Stage
from gpucarve.engine.placement.plan_keys import Plan, signature
from gpucarve.engine.state import CycleState
from gpucarve.engine.victims import Victim

PREEMPTION_SEARCHES_PER_QUEUE = 4


def preempt(c: CycleState, w: Workload, plan: Plan, demand: Demand) -> bool:
    """Reclaim, then priority preemption, for `w` on `plan`: evict the fewest victims that let
    the gang place (an admission of this cycle is withdrawn instead)."""
    pre = c.preemptor
    # A shape that found no victims finds none again until capacity is given back (not under
    # reservations: there a placement depends on the workload, not on its shape alone).
    key = None if c.placer.reserved else (w.queue, w.priority, signature(w, plan))
    if key is not None and c.memos.no_victims(key, c.ws.release_epoch):
        return False
    # Like Kueue, which considers only queue heads, bound the victim searches per queue
    # and cycle: the rest wait for the next cycle, when these evictions have settled.
    if not c.memos.search(w.queue, PREEMPTION_SEARCHES_PER_QUEUE):
        return False
    attempt = lambda: c.placer.place_gang(w, plan)[0]  # noqa: E731
    shape = tuple(
        (n.flavor, n.slices, pods)
        for n, pods, _ in plan
        if n.flavor is not None and not n.shared and n.slices > 0 and pods > 0
    )
    # Idle work first: its GPUs serve nobody, so taking them destroys the least.
    sets = (
        (Cause.IDLE, pre.idle_candidates(w, demand) if pre.idle else []),
        (Cause.RECLAIM, pre.reclaim_candidates(w, demand)),
        (Cause.PREEMPT, pre.preempt_candidates(w, demand)),
    )
    for cause, candidates in sets:
        if not candidates:
            continue
        cp = c.ws.checkpoint()
        search = pre.find_idle if cause is Cause.IDLE else pre.find
        found = search(w, demand, candidates, attempt, shape)
        if found is None:
            continue
        placed, victims = found
        if cause is Cause.RECLAIM and _waits_for_an_end(c, w, victims):
            c.ws.rollback(cp)  # nothing evicted, nothing placed: it waits for that end
            return False
        for victim in _merged(victims):
            v = victim.workload
            if v.id in c.decided.fresh:
                withdraw(c, v, w)
                continue
            msg = _why(c, cause, w, victim, demand)
            pods = tuple(sorted(p.pod for p in victim.pods))
            if pods:
                msg += f"; an elastic gang, it gives back {len(pods)} pods and keeps running"
            c.decided.evict(Eviction(v.id, v.queue, cause, w.id, msg, pods))
        evicted = [v.workload.id for v in victims if v.workload.id not in c.decided.withdrawn]
        c.record(w, placed, Stage.PREEMPTION, list(dict.fromkeys(evicted)))
        return True
    if key is not None:
        c.memos.found_no_victims(key, c.ws.release_epoch)
    return False


def _why(c: CycleState, cause: Cause, w: Workload, victim: Victim, demand: Demand) -> str:
    v = victim.workload
    flavors = sorted({p.flavor for p in victim.held if p.flavor})
    if cause is Cause.IDLE:
        rule = c.preemptor.idle_rules[v.queue]
        since = c.preemptor.idle[v.id].since
        msg = (
            f"reclaimed for {w.id} (queue {w.queue}): idle, its GPUs below "
            f"{rule.activity_below:g}% activity for {c.now - since}s, past queue {v.queue}'s "
            f"idleness.reclaimAfterSeconds ({rule.reclaim_after_s}s)"
        )
        if rule.within_quota:
            return msg + "; its rule reclaims within quota too (idleness.withinQuota: reclaim)"
        return msg + f"; queue {v.queue} was borrowing {', '.join(flavors)}"
    if cause is Cause.RECLAIM:
        msg = f"reclaimed by queue {w.queue} for {w.id}: queue {v.queue} was borrowing"
        needed = [f for f in flavors if f in demand]
        return msg + (f" {', '.join(needed)}" if needed else "")
    return f"preempted by {w.id} (priority {w.priority} > {v.priority})"


def _waits_for_an_end(c: CycleState, w: Workload, victims: Sequence[Victim]) -> bool:
    """Whether reclaim puts off evicting `victims` for `w` (scheduling.reclaimGraceSeconds):
    one of them is expected to end within the grace (by a deadline, or a declared or learned
    runtime: the default runtime says nothing), and `w` has waited less than the grace."""
    grace, setting = c.cfg.reclaim_grace_s, "scheduling.reclaimGraceSeconds"
    bound = c.wait_bounds.get(w.queue)
    if grace is not None and bound is not None and bound < grace:
        grace, setting = bound, f"queue {w.queue}'s reclaimWaitSeconds"
    if grace is None or c.now - w.submit_time >= grace:
        return False
    ends = []
    for v in victims:
        if v.workload.id in c.decided.fresh:
            continue  # admitted this cycle: withdrawing it destroys nothing
        seconds, whence = c.runtime(v.workload)
        end = v.rw.start_time + seconds
        if whence != "default" and end <= c.now + grace:
            ends.append((max(end, c.now), v.workload.id, whence))
    if not ends:
        return False
    end, victim, whence = min(ends)
    c.holds.put_off_reclaim(
        w.id,
        f"reclaim put off: {victim}, borrowed work it would evict, is expected to end in "
        f"{end - c.now}s (by {WHENCE[whence]}); queue {w.queue} waits for that "
        f"up to {grace}s from its submission ({setting})",
    )
    return True


def _merged(victims: Sequence[Victim]) -> list[Victim]:
    """One victim per workload: whole if any of its victims was (its surplus went with it)."""
    by: dict[str, Victim] = {}
    for v in victims:
        seen = by.get(v.workload.id)
        if seen is None or v.whole:
            by[v.workload.id] = v if v.whole or seen is None else seen
        elif not seen.whole:
            by[v.workload.id] = Victim(v.rw, (*seen.pods, *v.pods))
    return [by[k] for k in dict.fromkeys(v.workload.id for v in victims)]


def withdraw(c: CycleState, victim: Workload, by: Workload) -> None:
    """Take back an admission made earlier in this cycle (its pods never started)."""
    reason = PendingReason(
        Stage.PREEMPTION,
        Plugin.RECLAIM,
        f"admission withdrawn: queue {by.queue} reclaimed its quota for {by.id}",
    )
    c.decided.withdraw(victim.id, Pending(victim.id, victim.queue, reason))
