"""One scheduling cycle: `run_cycle(snapshot, now) -> CycleResult`.

Pure and deterministic: no I/O, no clock (``now`` is given), no randomness; the same snapshot
and ``now`` give the same result. The simulator and the Kubernetes scheduler both call it.

The orchestrator (`Cycle`) only orders the steps; each is a module that takes the cycle's
state (`state.CycleState`). For each pending workload in order:

1. Order. Queues take turns by fair share (the dominant share of what they borrow over their
   weight, lowest first); inside a queue by priority, then submit time.
2. Admit (`admit`). Validate against the queue: a flavor it has quota for must serve every pod set.
3. Allocate: for each flavor choice, check quota (nominal, then borrowing through the cohort),
   then place the whole gang on the working state under a checkpoint; commit or roll back.
4. Repartition: MIG instances a dynamic pool's repartition can create this cycle come before
   evicting anyone (`repartition.Reshaper`); the workload waits for them.
5. Reclaim: if the queue stays within nominal but its cohort lent the room out, evict
   borrowed workloads of other queues (`evict`).
6. Preempt: evict lower-priority workloads of the same queue.
7. Otherwise the workload stays pending with the reason of the stage that refused it.

After the queues: with `scheduling.consolidateMaxMoves`, running work is moved out of the way
of a gang that quota admits but no node set holds (`consolidate`); dynamic MIG pools are
planned for what placement refused (`repartition`).

A cycle that has placed `scheduling.maxPodsPerCycle` pods stops there: what it has not tried
waits with the reason `queueing/cycle-budget`, and the driver starts the next cycle at once
(`CycleStats.deferred`).

Queueing is best-effort FIFO with aging (`queueing`): a head that cannot be admitted lets work
behind it through until it has waited ``scheduling.maxHeadWaitSeconds``; then it holds its queue
for the flavors it needs and reserves those flavors on the nodes most likely to hold it, while
other work backfills the rest. Scheduling without gangs, for baselines, is `podwise`.
"""

from __future__ import annotations

import heapq
from collections import deque

from gpucarve.core.snapshot import Snapshot
from gpucarve.core.usage import UsageBook
from gpucarve.core.workload import Workload
from gpucarve.engine import (
    consolidate,
    drain,
    gang_timeout,
    idle,
    podwise,
    queueing,
    repartition,
    reservation,
)
from gpucarve.engine.admit import admit
from gpucarve.engine.decisions import (
    CycleResult,
    CycleStats,
    Pending,
    PendingReason,
    Plugin,
    Stage,
)
from gpucarve.engine.memo import AcrossCycles
from gpucarve.engine.state import CycleState
from gpucarve.engine.working import Working

# a queue's fair share: one figure, or one per level of a cohort tree from the root down
Share = tuple[int, ...]
HeapKey = tuple[Share, int, int, str]


class Cycle:
    """Orders the steps over a `CycleState`; the steps do the work."""

    def __init__(self, snapshot: Snapshot, now: int, ws: Working, memo: AcrossCycles) -> None:
        self.state = CycleState(snapshot, now, ws, memo)
        self.reshaper = repartition.Reshaper(self.state)
        # queue -> (usage version, head, fair share)
        self._shares: dict[str, tuple[int, str, Share]] = {}

    def run(self) -> CycleResult:
        s = self.state
        if not s.cfg.gang:
            podwise.continue_partial_gangs(s)
        skip = gang_timeout.release(s)
        s.note_waiting(skip)
        reservation.reserve_starving(s)
        drained = drain.drain(s)
        by_queue: dict[str, deque[Workload]] = {}
        for w in sorted(s.snapshot.pending, key=lambda w: (-w.priority, w.submit_time, w.id)):
            if w.id not in skip:
                by_queue.setdefault(w.queue, deque()).append(w)
        heap: list[HeapKey] = []
        for name, items in by_queue.items():
            heapq.heappush(heap, self._key(name, items[0]))
        attempted = deferred = 0
        budget = s.cfg.max_pods_per_cycle
        while heap:
            if budget is not None and s.decided.pods_placed >= budget:
                deferred = self._defer(heap, by_queue, budget)
                break
            _, _, _, name = heapq.heappop(heap)
            items = by_queue[name]
            w = items.popleft()
            behind = queueing.behind(s, w)
            if behind is not None:
                s.decided.wait(Pending(w.id, w.queue, behind))
                # Work behind a hold changes nothing, so the order in which it is visited does
                # not matter: the rest of this queue behind holds is taken here, off the heap.
                while items and (more := queueing.behind(s, items[0])) is not None:
                    nxt = items.popleft()
                    s.decided.wait(Pending(nxt.id, nxt.queue, more))
            else:
                attempted += 1
                outcome = admit(s, w, self.reshaper)
                if outcome.admitted and outcome.reason is not None:
                    # placed in part (no gangs): it runs short of pods, and says why
                    s.decided.wait(Pending(w.id, w.queue, outcome.reason))
                if not outcome.admitted:
                    reason = outcome.reason
                    assert reason is not None
                    if queueing.holds_queue(s, w, reason):
                        queueing.hold(s, w, reason)
                    reason = reservation.noted(s, w.id, reason)
                    s.decided.wait(Pending(w.id, w.queue, reason, outcome.tried))
            if items:
                heapq.heappush(heap, self._key(name, items[0]))
        if s.cfg.gang and not deferred:
            consolidate.consolidate(s)
            podwise.grow_elastic(s)
        drain.release(s, drained)
        repartitions, unserved = repartition.plan(s)
        stats = CycleStats(
            attempted=attempted,
            admitted=len(s.decided.admissions),
            pods_placed=s.decided.pods_placed,
            evicted=len(s.decided.evictions),
            pending=len(s.decided.pending),
            deferred=deferred,
        )
        return CycleResult(
            s.now,
            tuple(s.decided.admissions),
            tuple(s.decided.evictions),
            tuple(s.decided.pending),
            stats,
            repartitions,
            unserved,
            tuple(s.decided.reservations),
            idle.account(s),
            tuple(s.decided.drains),
            self._usage(),
            tuple(h for wid, h in s.held_idle.items() if wid in s.ws.running),
        )

    def _usage(self) -> UsageBook | None:
        """The usage book moved on to now, holding what the queues borrow after the cycle."""
        s = self.state
        half_life = s.cfg.usage_half_life_s
        if half_life is None:
            return None
        return s.snapshot.usage.moved_on(s.now, half_life, s.quotas.borrowed_shares())

    def _defer(
        self,
        heap: list[HeapKey],
        by_queue: dict[str, deque[Workload]],
        budget: int,
    ) -> int:
        """Everything not tried yet waits for the next cycle, in the order this one would have
        taken it (queues by fair share): the cycle placed its budget of pods."""
        s = self.state
        reason = PendingReason(
            Stage.QUEUEING,
            Plugin.CYCLE_BUDGET,
            f"not tried yet: this cycle placed {s.decided.pods_placed} pods, its budget "
            f"(scheduling.maxPodsPerCycle {budget}); the next cycle starts at once",
        )
        deferred = 0
        while heap:
            _, _, _, name = heapq.heappop(heap)
            for w in by_queue[name]:
                s.decided.wait(Pending(w.id, w.queue, reason))
                deferred += 1
        return deferred

    def _key(self, queue: str, head: Workload) -> HeapKey:
        """Queues take turns by fair share, lowest first; a queue's fair share is worked out
        again only when usage changed. In a cohort tree, shares are compared level by level
        from the root, each with the head admitted (`Quotas.share_path`)."""
        s = self.state
        nested = s.quotas.tree is not None
        cached = self._shares.get(queue)
        if cached is None or cached[0] != s.ws.usage_version or (nested and cached[1] != head.id):
            recent = s.recent.get(queue, 0)
            share: Share = (
                s.quotas.share_path(queue, s.first_demand(head), recent)
                if nested
                else (s.quotas.fair_share(queue, recent),)
            )
            cached = self._shares[queue] = (s.ws.usage_version, head.id, share)
        return (cached[2], -head.priority, head.submit_time, queue)
