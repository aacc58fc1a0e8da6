"""One scheduling cycle: `run_cycle(snapshot, now) -> CycleResult`.

Pure and deterministic: no I/O, no clock (``now`` is given), no randomness; the same snapshot
and ``now`` give the same result. The simulator and the Kubernetes scheduler both call it.

The steps, for each pending workload in order:

1. Order. Queues take turns by fair share (the dominant share of what they borrow over their
   weight, lowest first); inside a queue by priority, then submit time.
2. Validate against the queue: a flavor it has quota for must serve every pod set.
3. Allocate: for each flavor choice, check quota (nominal, then borrowing through the cohort),
   then place the whole gang on the working state under a checkpoint; commit or roll back.
4. Repartition: MIG instances a dynamic pool's repartition can create this cycle come before
   evicting anyone (`repartition.Reshaper`); the workload waits for them.
5. Reclaim: if the queue stays within nominal but its cohort lent the room out, evict
   borrowed workloads of other queues (`evict`).
6. Preempt: evict lower-priority workloads of the same queue.
7. Otherwise the workload stays pending with the reason of the stage that refused it.

After the queue: dynamic MIG pools are planned for what placement refused (`repartition`).

Queueing is best-effort FIFO with aging (`queueing`): a head that cannot be admitted lets work
behind it through until it has waited ``scheduling.maxHeadWaitSeconds``; then it holds its queue
for the flavors it needs and reserves those flavors on the nodes most likely to hold it, while
other work backfills the rest. Scheduling without gangs, for baselines, is `podwise`.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter, deque
from collections.abc import Sequence

from gpucarve.core.policy import Flavor
from gpucarve.core.requests import candidate_flavors, slices_per_pod
from gpucarve.core.snapshot import Snapshot
from gpucarve.core.workload import GpuRequest, PodAssignment, PodSet, RunningWorkload, Workload
from gpucarve.engine import evict, flavor_rank, gang_timeout, podwise, queueing, repartition
from gpucarve.engine.ceilings import Ceilings
from gpucarve.engine.decisions import (
    Admission,
    CycleResult,
    CycleStats,
    Eviction,
    Outcome,
    Pending,
    PendingReason,
    Stage,
)
from gpucarve.engine.mig_hint import shapes_from
from gpucarve.engine.placement import Placer
from gpucarve.engine.plan_keys import Plan, best_reason, signature
from gpucarve.engine.plugins import PodNeeds
from gpucarve.engine.preemption import Preemptor
from gpucarve.engine.quota import Quotas
from gpucarve.engine.working import Working

MAX_FLAVOR_COMBOS = 16
MEMO_LIMIT = 200_000


class Cycle:
    def __init__(self, snapshot: Snapshot, now: int, ws: Working) -> None:
        self.snapshot = snapshot
        self.policy = snapshot.policy
        self.cfg = snapshot.policy.scheduling
        self.now = now
        self.ws = ws
        self.quotas = Quotas(self.policy, self.ws.usage)
        self.placer = Placer(self.ws, self.cfg.scoring, self.cfg.candidates_per_pod)
        self.ceilings = Ceilings(self.ws, self.quotas)
        self.preemptor = Preemptor(self.ws, self.quotas, now, self.cfg.min_runtime_s)
        self.reshaper = repartition.Reshaper(self)
        self.admissions: list[Admission] = []
        self.evictions: list[Eviction] = []
        self.pending: list[Pending] = []
        self.pods_placed = 0
        # (queue, flavor) -> the head holding that queue's later work for the flavor
        self.queue_holds: dict[tuple[str, str], Workload] = {}
        # (plan signature) -> (release epoch, reason): a gang shape that did not fit keeps not
        # fitting until something is given back.
        self.no_room: dict[tuple[object, ...], tuple[int, PendingReason]] = {}
        self.no_victims: dict[tuple[object, ...], int] = {}
        self.searches: Counter[str] = Counter()
        self.failed: dict[tuple[object, ...], tuple[int, Outcome]] = {}
        self.fresh: dict[str, Admission] = {}
        self.withdrawn: set[str] = set()
        self.preemptor.fresh = self.fresh
        self._flavor_cache: dict[tuple[str, GpuRequest], list[Flavor]] = {}
        for memo in (ws.flavor_memo, ws.shape_memo):
            if len(memo) > MEMO_LIMIT:
                memo.clear()  # a long-lived scheduler sees workloads come and go
        self._shares: dict[str, tuple[int, int]] = {}  # queue -> (usage version, fair share)
        # (queue, flavor, head) -> why work behind that head waits, this cycle
        self.behind_reasons: dict[tuple[str, str, str], PendingReason] = {}
        self.placer.shapes = self._shapes()
        if self.placer.model.active:
            self.placer.model.set_demand(snapshot.pending, self._first_needs)

    def _first_needs(self, w: Workload) -> list[PodNeeds | None]:
        return flavor_rank.first_flavor_needs(w, self.flavors_for(w), self.needs_of)

    # ------------------------------------------------------------------ setup
    def flavors_for(self, w: Workload) -> list[list[Flavor]]:
        memo = self.ws.flavor_memo.get(w.id)
        if memo is not None and memo[0] is w:
            return memo[1]
        out = [self._flavors_of(w.queue, ps.gpu) for ps in w.pod_sets]
        self.ws.flavor_memo[w.id] = (w, out)
        return out

    def flavors_for_set(self, w: Workload, ps: PodSet) -> list[Flavor]:
        return self._flavors_of(w.queue, ps.gpu)

    def _flavors_of(self, queue: str, gpu: GpuRequest) -> list[Flavor]:
        key = (queue, gpu)
        hit = self._flavor_cache.get(key)
        if hit is None:
            hit = [
                f
                for f in candidate_flavors(self.policy, gpu)
                if self.quotas.has_quota(queue, f.name)
            ]
            self._flavor_cache[key] = hit
        return hit

    def _slices(self, gpu: GpuRequest, f: Flavor) -> int:
        return slices_per_pod(gpu, f, self.ws.flavors[f.name].gpu_memory)

    def _shapes(self) -> dict[str, Counter[int]]:
        """Pods per (flavor, slices per pod) among pending and running work."""
        counts: Counter[tuple[str, int]] = Counter()
        memo = self.ws.shape_memo
        for w in self.snapshot.pending:
            hit = memo.get(w.id)
            if hit is None or hit[0] is not w:
                mine: list[tuple[tuple[str, int], int]] = []
                for ps, flavors in zip(w.pod_sets, self.flavors_for(w), strict=True):
                    for f in flavors:
                        mine.append(((f.name, self._slices(ps.gpu, f)), ps.count))
                hit = memo[w.id] = (w, mine)
            for shape, n in hit[1]:
                counts[shape] += n
        for shape, n in sorted(self.ws.running_shapes.items()):
            if n:
                counts[shape] += n
        return shapes_from((f, size, n) for (f, size), n in counts.items())

    # ------------------------------------------------------------------ ordering
    def run(self) -> CycleResult:
        if not self.cfg.gang:
            podwise.continue_partial_gangs(self)
        skip = gang_timeout.release(self)
        by_queue: dict[str, deque[Workload]] = {}
        for w in sorted(self.snapshot.pending, key=lambda w: (-w.priority, w.submit_time, w.id)):
            if w.id not in skip:
                by_queue.setdefault(w.queue, deque()).append(w)
        heap: list[tuple[int, int, int, str]] = []
        for name, items in by_queue.items():
            heapq.heappush(heap, self._key(name, items[0]))
        attempted = 0
        while heap:
            _, _, _, name = heapq.heappop(heap)
            items = by_queue[name]
            w = items.popleft()
            behind = queueing.behind(self, w)
            if behind is not None:
                self.pending.append(Pending(w.id, w.queue, behind))
                # Work behind a hold changes nothing, so the order in which it is visited does
                # not matter: the rest of this queue behind holds is taken here, off the heap.
                while items and (more := queueing.behind(self, items[0])) is not None:
                    nxt = items.popleft()
                    self.pending.append(Pending(nxt.id, nxt.queue, more))
            else:
                attempted += 1
                outcome = self._admit(w)
                if outcome.admitted and outcome.reason is not None:
                    # placed in part (no gangs): it runs short of pods, and says why
                    self.pending.append(Pending(w.id, w.queue, outcome.reason))
                if not outcome.admitted:
                    assert outcome.reason is not None
                    self.pending.append(Pending(w.id, w.queue, outcome.reason, outcome.tried))
                    if queueing.holds_queue(self, w, outcome.reason):
                        queueing.hold(self, w, outcome.reason)
            if items:
                heapq.heappush(heap, self._key(name, items[0]))
        if self.cfg.gang:
            podwise.grow_elastic(self)
        repartitions, unserved = repartition.plan(self)
        stats = CycleStats(
            attempted=attempted,
            admitted=len(self.admissions),
            pods_placed=self.pods_placed,
            evicted=len(self.evictions),
            pending=len(self.pending),
        )
        return CycleResult(
            self.now,
            tuple(self.admissions),
            tuple(self.evictions),
            tuple(self.pending),
            stats,
            repartitions,
            unserved,
        )

    def _key(self, queue: str, head: Workload) -> tuple[int, int, int, str]:
        cached = self._shares.get(queue)
        if cached is None or cached[0] != self.ws.usage_version:
            cached = self._shares[queue] = (self.ws.usage_version, self.quotas.fair_share(queue))
        return (cached[1], -head.priority, head.submit_time, queue)

    # ------------------------------------------------------------------ admission
    def _admit(self, w: Workload) -> Outcome:
        # Within a cycle capacity only shrinks until something is given back, so a workload
        # of the same shape, queue and priority as one that just failed fails the same way.
        # (Not while a starving head holds flavors: that depends on submit times.)
        key = None if self.placer.reserved else (w.queue, w.priority, w.topology, w.pod_sets)
        if key is not None:
            cached = self.failed.get(key)
            if cached is not None and cached[0] == self.ws.release_epoch:
                return cached[1]
        outcome = self._try(w)
        # (A promise of new MIG instances counts each workload's own pods: never reused.)
        reason = outcome.reason
        promise = reason is not None and reason.plugin == repartition.PLUGIN
        if key is not None and not outcome.admitted and not promise:
            self.failed[key] = (self.ws.release_epoch, outcome)
        return outcome

    def _try(self, w: Workload) -> Outcome:
        if not self.cfg.gang:
            return podwise.place_pods_alone(self, w, Counter(), ())
        per_set = self.flavors_for(w)
        for ps, flavors in zip(w.pod_sets, per_set, strict=True):
            if ps.gpu.kind.value != "none" and not flavors:
                return Outcome(
                    False,
                    PendingReason(
                        Stage.VALIDATION,
                        "flavor",
                        f"queue {w.queue} has no quota for a flavor that serves "
                        f"{ps.gpu.describe()} (pod set {ps.name})",
                    ),
                )
        choices: list[list[Flavor | None]] = [list(f) if f else [None] for f in per_set]
        combos = list(itertools.islice(itertools.product(*choices), MAX_FLAVOR_COMBOS))
        impossible = [self.ceilings.never_fits(w, combo) for combo in combos]
        if all(r is not None for r in impossible):
            # Not even an empty cluster with all the quota the queue can reach would hold it:
            # say so, and never let it hold its queue.
            first = impossible[0]
            assert first is not None
            return Outcome(False, first, tuple(r for r in impossible if r is not None))
        combos = [c for c, r in zip(combos, impossible, strict=True) if r is None]
        if self.placer.model.active and len(combos) > 1:
            plans = [self._plan(w, c)[0] for c in combos]
            combos = flavor_rank.rank_combos(combos, self.placer.preview(w, plans))
        tried: list[PendingReason] = []
        unplaced: list[Sequence[Flavor | None]] = []
        for combo in combos:
            plan, _, reason = self._plan(w, combo)
            if reason is not None:
                tried.append(reason)
                continue
            assert plan is not None
            placed, reason = self._place(w, plan)
            if placed is not None:
                self.record(w, placed, Stage.QUOTA)
                return Outcome(True)
            assert reason is not None
            tried.append(reason)
            unplaced.append(combo)
        if self.cfg.preemption and unplaced:
            # Least disruptive first: MIG instances a repartition creates this cycle come
            # before evicting anyone.
            waiting = self.reshaper.absorbs(w, unplaced)
            if waiting is not None:
                return Outcome(False, waiting, (waiting, *tried))
        if self.cfg.preemption:
            for combo in combos:
                full_plan, demand, _ = self._plan(w, combo, ignore_quota=True)
                if full_plan is not None and evict.preempt(self, w, full_plan, demand):
                    return Outcome(True)
        return Outcome(False, best_reason(tried), tuple(tried))

    def needs_of(self, ps: PodSet, f: Flavor | None) -> PodNeeds:
        slices = self._slices(ps.gpu, f) if f is not None else 0
        shared = f is not None and self.ws.flavors[f.name].shared
        shared_mem = 0
        if shared and f is not None:
            gpu_mem = self.ws.flavors[f.name].gpu_memory
            shared_mem = ps.gpu.memory_mib or gpu_mem * slices // f.replicas
        name = f.name if f is not None else None
        return PodNeeds(ps, name, slices, shared, shared_mem, ps.cpu_milli, ps.memory_mib)

    def _plan(
        self, w: Workload, combo: Sequence[Flavor | None], ignore_quota: bool = False
    ) -> tuple[Plan | None, dict[str, int], PendingReason | None]:
        needs = [self.needs_of(ps, f) for ps, f in zip(w.pod_sets, combo, strict=True)]

        def demand_of(counts: Sequence[int]) -> dict[str, int]:
            d: Counter[str] = Counter()
            for n, c in zip(needs, counts, strict=True):
                if n.flavor is not None:
                    d[n.flavor] += n.slices * c
            return dict(d)

        full = [ps.count for ps in w.pod_sets]
        minimum = [ps.min_count for ps in w.pod_sets]
        if ignore_quota:
            # Preemption makes room for the minimum only: evict no more than the gang needs.
            return (
                [(n, m, m) for n, m in zip(needs, minimum, strict=True)],
                demand_of(minimum),
                None,
            )
        verdict = self.quotas.check(w.queue, demand_of(full))
        if verdict.fits:
            return (
                [(n, c, m) for n, c, m in zip(needs, full, minimum, strict=True)],
                demand_of(full),
                None,
            )
        if minimum != full and self.quotas.check(w.queue, demand_of(minimum)).fits:
            counts = minimum
            if len(needs) == 1:
                # One pod set: admit as many pods as quota allows between min and count.
                counts = [
                    next(
                        c
                        for c in range(full[0] - 1, minimum[0] - 1, -1)
                        if self.quotas.check(w.queue, demand_of([c])).fits
                    )
                ]
            plan = [(n, c, m) for n, c, m in zip(needs, counts, minimum, strict=True)]
            return plan, demand_of(counts), None
        message = verdict.message
        if verdict.reclaimable and self.cfg.preemption:
            # Within its nominal quota: say why reclaim has not made room (yet).
            message += (
                "; within its nominal quota, it reclaims from borrowing queues once their work "
                f"is preemptible and has run {self.cfg.min_runtime_s}s"
            )
        return (
            None,
            {},
            PendingReason(Stage.QUOTA, "capacity-quota", message, verdict.flavor),
        )

    def _place(
        self, w: Workload, plan: Plan
    ) -> tuple[list[PodAssignment] | None, PendingReason | None]:
        sig = signature(w, plan)
        cached = self.no_room.get(sig)
        if cached is not None and cached[0] == self.ws.release_epoch:
            return None, cached[1]
        placed, reason = self.placer.place_gang(w, plan)
        if placed is None:
            assert reason is not None
            self.no_room[sig] = (self.ws.release_epoch, reason)
        return placed, reason

    def record(
        self,
        w: Workload,
        placed: list[PodAssignment],
        stage: Stage,
        victims: Sequence[str] = (),
        pods_before: tuple[PodAssignment, ...] = (),
        precharged: bool = False,
    ) -> None:
        charged: Counter[str] = Counter()
        for pod in placed:
            if pod.flavor is not None:
                charged[pod.flavor] += len(pod.slice_ids)
        if not precharged:
            for flavor, n in sorted(charged.items()):
                self.ws.adjust_usage(w.queue, flavor, n)
        borrowed = tuple(
            (f, b) for f in sorted(charged) if (b := self.quotas.borrowed(w.queue, f)) > 0
        )
        self.pods_placed += len(placed)
        admission = Admission(
            workload=w.id,
            queue=w.queue,
            pods=tuple(placed),
            charged=tuple(sorted(charged.items())),
            borrowed=borrowed,
            after_evictions=evict.waits_for(self.snapshot, self.evictions, placed, victims),
            stage=stage,
        )
        self.admissions.append(admission)
        # Admitted this cycle, not started: reclaim may still withdraw it at no cost, which
        # beats evicting older work of the same queue.
        start = self.now
        if pods_before:
            start = self.ws.running[w.id].start_time
        self.ws.add_running(RunningWorkload(w, (*pods_before, *placed), start))
        self.fresh[w.id] = admission
