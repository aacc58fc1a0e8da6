"""What one cycle knows and has decided so far: the working copy of the cluster, quotas,
the placer and the preemptor, the decisions made, and the memos that keep a cycle fast.

Every step of the cycle (`admit`, `queueing`, `evict`, `podwise`, `gang_timeout`,
`repartition`) takes a `CycleState` and adds to it; none imports the orchestrator
(`cycle.Cycle`), which only orders the steps. `record` is the one way a step admits work, so
usage, the borrowed amounts and the admission's wait for evictions are kept the same way
whoever admits.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence

from gpucarve.core.policy import Flavor
from gpucarve.core.requests import candidate_flavors, slices_per_pod
from gpucarve.core.snapshot import Snapshot
from gpucarve.core.workload import (
    GpuKind,
    GpuRequest,
    PodAssignment,
    PodSet,
    RunningWorkload,
    Workload,
)
from gpucarve.engine.ceilings import Ceilings
from gpucarve.engine.decisions import (
    Admission,
    Drain,
    Eviction,
    Outcome,
    Pending,
    PendingReason,
    Reservation,
    Stage,
)
from gpucarve.engine.mig.hint import shapes_from
from gpucarve.engine.placement.flavor_rank import first_flavor_needs
from gpucarve.engine.placement.holds import Hold
from gpucarve.engine.placement.placer import Placer, PlacerContext
from gpucarve.engine.placement.plugins import PodNeeds
from gpucarve.engine.preemption import Preemptor, victim_order
from gpucarve.engine.quota import Quotas
from gpucarve.engine.working import Working

MEMO_LIMIT = 200_000


class CycleState:
    def __init__(self, snapshot: Snapshot, now: int, ws: Working) -> None:
        self.snapshot = snapshot
        self.policy = snapshot.policy
        self.cfg = snapshot.policy.scheduling
        self.now = now
        self.ws = ws
        self.quotas = Quotas(self.policy, self.ws.usage)
        self.ceilings = Ceilings(self.ws, self.quotas)
        self.preemptor = Preemptor(
            self.ws, self.quotas, now, self.cfg.min_runtime_s, victim_order(self.cfg.victim_order)
        )
        self.preemptor.large = (self.cfg.reclaim_large_ratio, self.cfg.reclaim_large_after_s)
        self.preemptor.wait_bounds = self.wait_bounds = {
            q.name: q.reclaim_wait_s for q in self.policy.queues if q.reclaim_wait_s is not None
        }
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
        # workload -> why its reclaim was put off this cycle (scheduling.reclaimGraceSeconds)
        self.reclaim_waits: dict[str, str] = {}
        self.failed: dict[tuple[object, ...], tuple[int, Outcome]] = {}
        self.fresh: dict[str, Admission] = {}
        self.withdrawn: set[str] = set()
        self.preemptor.fresh = self.fresh
        self._flavor_cache: dict[tuple[str, GpuRequest], list[Flavor]] = {}
        # workload -> its flavors as its node selection narrows and orders them, this cycle
        # (nodes and their labels change between cycles; the quota's choice is kept in ws)
        self._selected: dict[str, tuple[Workload, list[list[Flavor]]]] = {}
        for memo in (ws.flavor_memo, ws.shape_memo, ws.idle_memo, ws.shape_kinds):
            if len(memo) > MEMO_LIMIT:
                memo.clear()  # a long-lived scheduler sees workloads come and go
        # (queue, flavor, head) -> why work behind that head waits, this cycle
        self.behind_reasons: dict[tuple[str, str, str], PendingReason] = {}
        self.placer = Placer(
            self.ws,
            self.cfg.scoring,
            self.cfg.candidates_per_pod,
            PlacerContext(self._shapes(), self.ends_at, self.within_nominal),
        )
        self.reservations: list[Reservation] = []
        self.drains: list[Drain] = []
        # (queue, flavor) -> the reserving gang that holds the queue's quota of the flavor
        # against later work expected to run past its start (queueing.behind)
        self.queue_reserved: dict[tuple[str, str], Hold] = {}
        self.reserved_notes: dict[str, str] = {}  # workload -> what it reserved, for its reason
        # workload -> the demand it counts in quotas.waiting (scheduling.loansWaitForLenders)
        self.waiting_demand: dict[str, dict[str, int]] = {}
        self.placer.set_demand(snapshot.pending, self._first_needs)

    def note_waiting(self, skip: Collection[str]) -> None:
        """Under scheduling.loansWaitForLenders: count what each pending workload that fits
        within its queue's nominal quota (beside what the queue holds) asks, so that quota is
        not lent while it waits. Work that could only run on loan keeps nothing back, nor
        does work no node could ever hold (a tenant's pod asking more than a node has would
        otherwise keep its queue's quota idle for ever)."""
        if not self.cfg.loans_wait_for_lenders:
            return
        for w in self.snapshot.pending:
            combo = None if w.id in skip else self.first_flavors(w)
            if combo is None or self.ceilings.never_fits(w, combo) is not None:
                continue
            demand = self.first_demand(w)
            if demand and self.quotas.within_nominal(w.queue, demand):
                self.waiting_demand[w.id] = demand
                self.quotas.note_waiting(w.queue, demand)

    def runtime(self, w: Workload) -> tuple[int, str]:
        """Seconds `w` is expected to run, and whence (core.runtime)."""
        return self.snapshot.runtimes.expected(w, self.cfg.default_runtime_s)

    def first_demand(self, w: Workload) -> dict[str, int]:
        """Slices per flavor the workload's minimum pods need on their first flavor choice
        (the one holds, quotas and reservations weigh)."""
        need: dict[str, int] = {}
        for ps, flavors in zip(w.pod_sets, self.flavors_for(w), strict=True):
            if flavors:
                f = flavors[0]
                need[f.name] = need.get(f.name, 0) + self.needs_of(ps, f).slices * ps.min_count
        return need

    def first_flavors(self, w: Workload) -> list[Flavor | None] | None:
        """Each pod set's first flavor choice (None for a pod set without GPUs), the one holds,
        quotas, reservations and consolidation weigh; None when no flavor serves a pod set
        that asks for GPUs (it never runs)."""
        combo: list[Flavor | None] = []
        for flavors, ps in zip(self.flavors_for(w), w.pod_sets, strict=True):
            if not flavors and ps.gpu.kind is not GpuKind.NONE:
                return None
            combo.append(flavors[0] if flavors else None)
        return combo

    def within_nominal(self, w: Workload) -> bool:
        """Whether `w`, beside what its queue already uses, fits the queue's nominal quota on
        its first flavor choice (what the queue is guaranteed, whatever others borrow)."""
        return self.quotas.within_nominal(w.queue, self.first_demand(w))

    def ends_at(self, w: Workload) -> int:
        """When `w`, started now, is expected to end."""
        return self.now + self.runtime(w)[0]

    def end_of(self, rw: RunningWorkload) -> int:
        """When running work is expected to end; work past its estimate any moment now (it is
        never stopped for overrunning: a reservation behind it moves)."""
        return max(rw.start_time + self.runtime(rw.workload)[0], self.now + 1)

    def _first_needs(self, w: Workload) -> list[PodNeeds | None]:
        return first_flavor_needs(w, self.flavors_for(w), self.needs_of)

    def flavors_for(self, w: Workload) -> list[list[Flavor]]:
        """Per pod set, the flavors its queue has quota for that serve its request, less those
        no node of which its node selection matches, preferred ones first."""
        memo = self.ws.flavor_memo.get(w.id)
        if memo is not None and memo[0] is w:
            served = memo[1]
        else:
            served = [self._flavors_of(w.queue, ps.gpu) for ps in w.pod_sets]
            self.ws.flavor_memo[w.id] = (w, served)
        if not any(ps.node_selector or ps.affinity or ps.preferred for ps in w.pod_sets):
            return served
        hit = self._selected.get(w.id)
        if hit is not None and hit[0] is w:
            return hit[1]
        out = [self._selectable(ps, fs) for ps, fs in zip(w.pod_sets, served, strict=True)]
        self._selected[w.id] = (w, out)
        return out

    def flavors_for_set(self, w: Workload, ps: PodSet) -> list[Flavor]:
        return self._selectable(ps, self._flavors_of(w.queue, ps.gpu))

    def _selectable(self, ps: PodSet, flavors: list[Flavor]) -> list[Flavor]:
        """`flavors` whose nodes the pod set's selection matches, those its preferred terms
        weigh most on first; all of them when none matches (the ceiling then names the
        requirement no node meets)."""
        kept = [f for f in flavors if self.ceilings.selects(ps, f.name)] or flavors
        if ps.preferred and len(kept) > 1:
            kept = sorted(kept, key=lambda f: -self.ceilings.preference(ps, f.name))
        return kept

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
        kinds = self.ws.shape_kinds
        for w in self.snapshot.pending:
            hit = memo.get(w.id)
            if hit is None or hit[0] is not w:
                # work of one kind (a Job's shape, submitted again and again) is worked out once
                kind = (w.queue, w.pod_sets)
                mine = kinds.get(kind)
                if mine is None:
                    mine = []
                    for ps, flavors in zip(w.pod_sets, self.flavors_for(w), strict=True):
                        for f in flavors:
                            mine.append(((f.name, self._slices(ps.gpu, f)), ps.count))
                    kinds[kind] = mine
                hit = memo[w.id] = (w, mine)
            for shape, n in hit[1]:
                counts[shape] += n
        for shape, n in sorted(self.ws.running_shapes.items()):
            if n:
                counts[shape] += n
        return shapes_from((f, size, n) for (f, size), n in counts.items())

    def needs_of(self, ps: PodSet, f: Flavor | None) -> PodNeeds:
        slices = self._slices(ps.gpu, f) if f is not None else 0
        shared = f is not None and self.ws.flavors[f.name].shared
        shared_mem = 0
        if shared and f is not None:
            gpu_mem = self.ws.flavors[f.name].gpu_memory
            shared_mem = ps.gpu.memory_mib or gpu_mem * slices // f.replicas
        name = f.name if f is not None else None
        return PodNeeds(ps, name, slices, shared, shared_mem, ps.cpu_milli, ps.memory_mib)

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
            (k, b)
            for k in sorted(self.quotas.charge(w.queue, charged))
            if (b := self.quotas.borrowed(w.queue, k)) > 0
        )
        self.pods_placed += len(placed)
        counted = self.waiting_demand.pop(w.id, None)
        if counted is not None:
            self.quotas.note_waiting(w.queue, counted, -1)
        admission = Admission(
            workload=w.id,
            queue=w.queue,
            pods=tuple(placed),
            charged=tuple(sorted(charged.items())),
            borrowed=borrowed,
            after_evictions=waits_for(self.snapshot, self.evictions, placed, victims),
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


def waits_for(
    snapshot: Snapshot,
    evictions: Sequence[Eviction],
    placed: Sequence[PodAssignment],
    victims: Sequence[str],
) -> tuple[str, ...]:
    """The workloads an admission must see gone before its pods start: its own preemption's
    victims, and the owner of any slice an eviction earlier in the cycle freed. On Kubernetes
    an evicted pod holds its GPUs until it has terminated: binding another pod onto them at
    once would give them twice."""
    if not evictions:
        return tuple(victims)
    evicted = {e.workload for e in evictions}
    held = {
        sid: rw.workload.id
        for rw in snapshot.running
        if rw.workload.id in evicted
        for p in rw.pods
        for sid in p.slice_ids
    }
    freed = {o for p in placed for sid in p.slice_ids if (o := held.get(sid)) is not None}
    return (*victims, *sorted(freed - set(victims)))
