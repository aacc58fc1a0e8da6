"""What one cycle knows and has decided so far: the working copy of the cluster, quotas,
the placer and the preemptor, and the cycle's own state split by who writes it: what it
decided (`Decided`), what holds work back (`Holds`), what it remembers to stay fast (`Memos`),
each written only through its methods; what the engine remembers across cycles is its own
(`memo.AcrossCycles`). `tests/engine/test_cycle_state_sealed.py` refuses a write from outside.

Every step of the cycle (`admit`, `queueing`, `evict`, `podwise`, `gang_timeout`,
`repartition`) takes a `CycleState` and adds to it; none imports the orchestrator
(`cycle.Cycle`), which only orders the steps. `record` is the one way a step admits work, so
usage, the borrowed amounts and the admission's wait for evictions are kept the same way
whoever admits.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from collections.abc import Set as AbstractSet

from gpucarve.core.amounts import Demand, FlavorName
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
from gpucarve.engine.held_idle import judge as judge_held_idle
from gpucarve.engine.memo import AcrossCycles, Shapes
from gpucarve.engine.mig.hint import shapes_from
from gpucarve.engine.placement.flavor_rank import first_flavor_needs
from gpucarve.engine.placement.holds import Hold
from gpucarve.engine.placement.placer import Placer, PlacerContext
from gpucarve.engine.placement.plugins import PodNeeds
from gpucarve.engine.preemption import Preemptor
from gpucarve.engine.quota import Quotas
from gpucarve.engine.victims import victim_order
from gpucarve.engine.working import Working

MEMO_LIMIT = 200_000


class Decided:
    """What the cycle has decided so far: admissions (those of this cycle, `fresh`, until one
    is withdrawn), evictions, pending work with its reasons, reservations and drains, and the
    pods placed. Only these methods write it; other steps read it through read-only views
    (mypy refuses a write through them)."""

    def __init__(self) -> None:
        self._admissions: list[Admission] = []
        self._evictions: list[Eviction] = []
        self._pending: list[Pending] = []
        self._fresh: dict[str, Admission] = {}
        self._withdrawn: set[str] = set()
        self._reservations: list[Reservation] = []
        self._drains: list[Drain] = []
        self._pods_placed = 0

    @property
    def admissions(self) -> Sequence[Admission]:
        return self._admissions

    @property
    def evictions(self) -> Sequence[Eviction]:
        return self._evictions

    @property
    def pending(self) -> Sequence[Pending]:
        return self._pending

    @property
    def fresh(self) -> Mapping[str, Admission]:
        """Admitted this cycle, not started: reclaim may withdraw it at no cost."""
        return self._fresh

    @property
    def withdrawn(self) -> AbstractSet[str]:
        return self._withdrawn

    @property
    def reservations(self) -> Sequence[Reservation]:
        return self._reservations

    @property
    def drains(self) -> Sequence[Drain]:
        return self._drains

    @property
    def pods_placed(self) -> int:
        return self._pods_placed

    def admit(self, admission: Admission) -> None:
        self._admissions.append(admission)
        self._fresh[admission.workload] = admission
        self._pods_placed += len(admission.pods)

    def withdraw(self, workload: str, why: Pending) -> None:
        """Take back an admission of this cycle (its pods never started); it waits, saying why."""
        admission = self._fresh.pop(workload)
        self._admissions.remove(admission)
        self._pods_placed -= len(admission.pods)
        self._withdrawn.add(workload)
        self._pending.append(why)

    def evict(self, eviction: Eviction) -> None:
        self._evictions.append(eviction)

    def wait(self, pending: Pending) -> None:
        self._pending.append(pending)

    def placed_after_all(self, workload: str) -> None:
        """Work found pending earlier in the cycle and placed later (consolidation) no longer
        waits."""
        self._pending = [p for p in self._pending if p.workload != workload]

    def reserve(self, reservation: Reservation) -> None:
        self._reservations.append(reservation)

    def drain(self, drain: Drain) -> None:
        self._drains.append(drain)


class Holds:
    """What holds work back this cycle, by who set it: a queue's head holding the queue's later
    work on a flavor (queueing), a reserving gang holding its queue's quota (reservation) and
    what it noted for its reason, the demand waiting work keeps from being lent
    (loansWaitForLenders), and reclaims put off (reclaimGraceSeconds). Only these methods
    write it; the first hold set on a key stays."""

    def __init__(self) -> None:
        self._queue_heads: dict[tuple[str, FlavorName], Workload] = {}
        self._quota_reserved: dict[tuple[str, FlavorName], Hold] = {}
        self._notes: dict[str, str] = {}
        self._waiting: dict[str, Demand] = {}
        self._reclaim_waits: dict[str, str] = {}

    def hold_queue(self, queue: str, flavor: FlavorName, head: Workload) -> None:
        self._queue_heads.setdefault((queue, flavor), head)

    def queue_head(self, queue: str, flavor: FlavorName) -> Workload | None:
        return self._queue_heads.get((queue, flavor))

    def queues_held(self) -> bool:
        return bool(self._queue_heads)

    def reserve_quota(self, queue: str, flavor: FlavorName, hold: Hold) -> None:
        self._quota_reserved.setdefault((queue, flavor), hold)

    def quota_reserved(self, queue: str, flavor: FlavorName) -> Hold | None:
        return self._quota_reserved.get((queue, flavor))

    def any_quota_reserved(self) -> bool:
        return bool(self._quota_reserved)

    def note_reserved(self, workload: str, note: str) -> None:
        self._notes[workload] = note

    def reserved_note(self, workload: str) -> str | None:
        return self._notes.get(workload)

    def keep_waiting(self, workload: str, demand: Demand) -> None:
        self._waiting[workload] = demand

    def stop_keeping(self, workload: str) -> Demand | None:
        """The demand `workload` kept from being lent, no longer kept (None: it kept none)."""
        return self._waiting.pop(workload, None)

    def put_off_reclaim(self, workload: str, why: str) -> None:
        self._reclaim_waits[workload] = why

    def reclaim_put_off(self, workload: str) -> str | None:
        return self._reclaim_waits.get(workload)


class Memos:
    """What one cycle remembers to stay fast, dropped with it. Within a cycle capacity only
    shrinks until something is given back (`Working.release_epoch`), so a verdict kept with
    the epoch it was reached in stands until the epoch moves."""

    def __init__(self) -> None:
        self._failed: dict[tuple[object, ...], tuple[int, Outcome]] = {}
        self._no_room: dict[tuple[object, ...], tuple[int, PendingReason]] = {}
        self._no_victims: dict[tuple[object, ...], int] = {}
        self._searches: Counter[str] = Counter()
        self._behind: dict[tuple[str, str, str], PendingReason] = {}

    def failed(self, key: tuple[object, ...], epoch: int) -> Outcome | None:
        hit = self._failed.get(key)
        return hit[1] if hit is not None and hit[0] == epoch else None

    def fail(self, key: tuple[object, ...], epoch: int, outcome: Outcome) -> None:
        self._failed[key] = (epoch, outcome)

    def no_room(self, key: tuple[object, ...], epoch: int) -> PendingReason | None:
        hit = self._no_room.get(key)
        return hit[1] if hit is not None and hit[0] == epoch else None

    def found_no_room(self, key: tuple[object, ...], epoch: int, reason: PendingReason) -> None:
        self._no_room[key] = (epoch, reason)

    def no_victims(self, key: tuple[object, ...], epoch: int) -> bool:
        return self._no_victims.get(key) == epoch

    def found_no_victims(self, key: tuple[object, ...], epoch: int) -> None:
        self._no_victims[key] = epoch

    def search(self, queue: str, limit: int) -> bool:
        """Whether `queue` may search for victims again this cycle (counted when it may)."""
        if self._searches[queue] >= limit:
            return False
        self._searches[queue] += 1
        return True

    def behind(self, key: tuple[str, str, str], make: Callable[[], PendingReason]) -> PendingReason:
        """Why work behind a head waits, made once per (queue, flavor, head)."""
        hit = self._behind.get(key)
        if hit is None:
            hit = self._behind[key] = make()
        return hit


class CycleState:
    def __init__(self, snapshot: Snapshot, now: int, ws: Working, memo: AcrossCycles) -> None:
        self.snapshot = snapshot
        self.memo = memo  # what the engine remembers across cycles (engine.memo)
        self.policy = snapshot.policy
        self.cfg = snapshot.policy.scheduling
        self.now = now
        self.ws = ws
        self.quotas = Quotas(self.policy, self.ws.usage)
        # what each queue borrowed recently, decayed to now (empty without a half-life)
        half_life = self.cfg.usage_half_life_s
        self.recent = snapshot.usage.at(now, half_life) if half_life else {}
        self.ceilings = Ceilings(self.ws, self.quotas)
        self.preemptor = Preemptor(
            self.ws, self.quotas, now, self.cfg.min_runtime_s, victim_order(self.cfg.victim_order)
        )
        self.preemptor.large = (self.cfg.reclaim_large_ratio, self.cfg.reclaim_large_after_s)
        self.preemptor.wait_bounds = self.wait_bounds = {
            q.name: q.reclaim_wait_s for q in self.policy.queues if q.reclaim_wait_s is not None
        }
        rules = {q.name: q.idleness for q in self.policy.queues if q.idleness is not None}
        # running work idle past its warning window, as the cycle starts (engine.held_idle)
        self.held_idle = (
            judge_held_idle(rules, dict(snapshot.idle_since), ws.running, self.quotas, now)
            if rules and snapshot.idle_since
            else {}
        )
        self.preemptor.idle = self.held_idle
        self.preemptor.idle_rules = rules
        # the cycle's state by who writes it: what it decided, what holds work back, and what
        # it remembers to stay fast (each written only through its own methods)
        self.decided = Decided()
        self.holds = Holds()
        self.memos = Memos()
        self.preemptor.fresh = self.decided.fresh
        self._flavor_cache: dict[tuple[str, GpuRequest], list[Flavor]] = {}
        # workload -> its flavors as its node selection narrows and orders them, this cycle
        # (nodes and their labels change between cycles; the quota's choice is kept in ws)
        self._selected: dict[str, tuple[Workload, list[list[Flavor]]]] = {}
        memo.trim(MEMO_LIMIT)  # a long-lived scheduler sees workloads come and go
        self.placer = Placer(
            self.ws,
            self.cfg.scoring,
            self.cfg.candidates_per_pod,
            PlacerContext(self._shapes(), self.ends_at, self.within_nominal),
        )
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
                self.holds.keep_waiting(w.id, demand)
                self.quotas.note_waiting(w.queue, demand)

    def runtime(self, w: Workload) -> tuple[int, str]:
        """Seconds `w` is expected to run, and whence (core.runtime)."""
        return self.snapshot.runtimes.expected(w, self.cfg.default_runtime_s)

    def first_demand(self, w: Workload) -> Demand:
        """Slices per flavor the workload's minimum pods need on their first flavor choice
        (the one holds, quotas and reservations weigh)."""
        need: Demand = {}
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
        served = self.memo.flavors(w, self._served)
        if not any(ps.node_selector or ps.affinity or ps.preferred for ps in w.pod_sets):
            return served
        hit = self._selected.get(w.id)
        if hit is not None and hit[0] is w:
            return hit[1]
        out = [self._selectable(ps, fs) for ps, fs in zip(w.pod_sets, served, strict=True)]
        self._selected[w.id] = (w, out)
        return out

    def _served(self, w: Workload) -> list[list[Flavor]]:
        return [self._flavors_of(w.queue, ps.gpu) for ps in w.pod_sets]

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

    def _shapes(self) -> dict[FlavorName, Counter[int]]:
        """Pods per (flavor, slices per pod) among pending and running work."""
        counts: Counter[tuple[FlavorName, int]] = Counter()
        shapes, shape_of = self.memo.shapes, self._shape_of
        for w in self.snapshot.pending:
            for shape, n in shapes(w, shape_of):
                counts[shape] += n
        for shape, n in sorted(self.ws.running_shapes.items()):
            if n:
                counts[shape] += n
        return shapes_from((f, size, n) for (f, size), n in counts.items())

    def _shape_of(self, w: Workload) -> Shapes:
        return [
            ((f.name, self._slices(ps.gpu, f)), ps.count)
            for ps, flavors in zip(w.pod_sets, self.flavors_for(w), strict=True)
            for f in flavors
        ]

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
        charged: Counter[FlavorName] = Counter()
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
        counted = self.holds.stop_keeping(w.id)
        if counted is not None:
            self.quotas.note_waiting(w.queue, counted, -1)
        admission = Admission(
            workload=w.id,
            queue=w.queue,
            pods=tuple(placed),
            charged=tuple(sorted(charged.items())),
            borrowed=borrowed,
            after_evictions=waits_for(self.snapshot, self.decided.evictions, placed, victims),
            stage=stage,
        )
        # Admitted this cycle, not started: reclaim may still withdraw it at no cost, which
        # beats evicting older work of the same queue.
        self.decided.admit(admission)
        start = self.now
        if pods_before:
            start = self.ws.running[w.id].start_time
        self.ws.add_running(RunningWorkload(w, (*pods_before, *placed), start))


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
