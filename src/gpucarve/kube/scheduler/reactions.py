"""What the scheduler does with a cycle's decisions: one reaction per duty, run in the order
the scheduler is configured with (`REACTIONS`). A cycle is observe (the view and the snapshot
the engine is given), decide (the engine's cycle), then each reaction in turn; a new reaction
is a class with `react` and an entry in the list, never an edit of the cycle.

A reaction reads and writes the scheduler only through `Parts`, the scheduler's parts it may
use (the binder, the reporter, the metrics, the evictions awaited...): what a reaction may
touch is written here, not found by reading the loop."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from gpucarve.core.policy import DeviceApi, Policy, SharingMode, SliceKind
from gpucarve.core.snapshot import Snapshot
from gpucarve.core.workload import GpuKind, PodAssignment, Workload
from gpucarve.engine import Engine
from gpucarve.engine.decisions import Admission, CycleResult
from gpucarve.kube.api.client import Client, rfc3339
from gpucarve.kube.api.informer import Informer
from gpucarve.kube.scheduler.binder import Binder
from gpucarve.kube.scheduler.cycle_log import CycleLog
from gpucarve.kube.scheduler.evictions import (
    REFUSED_RETRY_S,
    Acting,
    PastBudget,
    Refused,
    awaited_pods,
    awaited_slices,
    evict_pods,
    refusal,
)
from gpucarve.kube.scheduler.fraction_shares import ShareMarks, on_gpus, shares
from gpucarve.kube.scheduler.held_idle import IDLE_EVENT, IdleMarks, Told, under_rules
from gpucarve.kube.scheduler.mig_handoff import MigHandoff
from gpucarve.kube.scheduler.observed import CycleSeen, Observer, tell
from gpucarve.kube.scheduler.reporter import Reporter
from gpucarve.kube.view.cluster_view import View
from gpucarve.kube.view.nodes.device_truth import busy_gpus
from gpucarve.kube.view.nodes.inventory import Inventory
from gpucarve.kube.view.observe import outside_the_cycle
from gpucarve.kube.view.pods.assigned import Assigned
from gpucarve.kube.view.pods.owner_kinds import POD_GROUPS, WORKLOAD_API
from gpucarve.metrics.scheduler_metrics import SchedulerMetrics


@dataclass
class CycleReport:
    now: int
    bound: int = 0  # bindings started (they finish in the background)
    evicted: int = 0
    pending: int = 0


@dataclass(frozen=True)
class Decided:
    """One cycle as its reactions see it: the view observed, the snapshot the engine was
    given, its result, the pending workloads held back from it while a pod of theirs is in
    its binding's back-off (with why), how long the engine took (for the metrics only), and
    the report the reactions fill in."""

    view: View
    snapshot: Snapshot
    result: CycleResult
    backing: Mapping[str, str]
    took: float
    report: CycleReport


class Parts(Protocol):
    """The scheduler's parts a reaction may use."""

    client: Client
    policy: Policy
    engine: Engine
    epoch: datetime
    clock: Callable[[], datetime]
    cycles: int
    binder: Binder
    reporter: Reporter
    metrics: SchedulerMetrics
    mig: MigHandoff
    cycle_log: CycleLog
    observers: list[Observer]
    nodes: Informer
    pods: Informer
    owners: dict[str, Informer]
    served: set[str]
    past_budget: PastBudget
    # workload -> victims still to go, the slices it was given, its refused victims
    awaiting: dict[str, frozenset[str]]
    holding: dict[str, tuple[str, ...]]
    refused: dict[str, Refused]
    dynamic_mig: bool
    idle_told: Told
    idle_marks: IdleMarks
    share_marks: ShareMarks

    @property
    def assumed(self) -> dict[str, Assigned]: ...

    def inventory(self) -> Inventory: ...

    def ask(self) -> None:
        """A cycle soon, whatever the informers saw."""

    def waiting(self, backing: Mapping[str, str]) -> dict[str, frozenset[str]]:
        """Workloads that wait outside the cycle (for victims, after a refused eviction, or
        in a binding's back-off), by the pods they wait for."""


class Reaction(Protocol):
    def react(self, s: Parts, d: Decided) -> None: ...


class AskAgain:
    """A cycle that placed its budget of pods and left the rest untried: the next at once."""

    def react(self, s: Parts, d: Decided) -> None:
        if d.result.stats.deferred:
            s.ask()


class IdleWarnings:
    """Work its queue's idleness rule judges idle: its pods marked with since when (the mark
    taken off once it is busy again), and a Warning Event on them once per stage (warned,
    then reclaimable), before any eviction of the cycle: what is reclaimed was told first."""

    def react(self, s: Parts, d: Decided) -> None:
        mine = under_rules(s.policy, d.snapshot)
        if not mine and not s.idle_told.stage:
            return  # the common case: no idleness rule, or no work under one
        s.idle_marks.write(d.view.running_pods, mine, s.pods.get, d.snapshot.idle_since, s.epoch)
        for h in s.idle_told.news(d.result.held_idle):
            for pod in d.view.running_pods.get(h.workload, ()):
                s.reporter.event(pod, "Warning", IDLE_EVENT, h.message)


class Evict:
    """Evictions first, through the Eviction API; the workload that asked for them waits,
    out of the snapshot, until its victims are gone, or is asked again after a refusal."""

    def react(self, s: Parts, d: Decided) -> None:
        past, report, result = s.past_budget, d.report, d.result
        past.forget(report.now)
        if not result.evictions:
            return  # the common case: nothing to evict, nothing awaited
        past.after_s = s.policy.scheduling.reclaim_past_budget_s  # a reload may change it
        act = Acting(s.client, s.reporter, report.now, rfc3339(s.clock()), past)
        refused = evict_pods(act, d.view, result)
        report.evicted += len(result.evictions)
        slices = awaited_slices(result)
        for w, victims in awaited_pods(d.view, result).items():
            stays = {pod: refused[pod] for pod in sorted(victims) if pod in refused}
            if stays:
                # a victim stays (its eviction refused: a PodDisruptionBudget's 429, or RBAC's
                # 403): nothing is held for it, and the engine asks again once the server's
                # back-off has passed
                why = refusal(stays, past.reclaimed(stays))
                s.refused[w] = Refused(stays, report.now + REFUSED_RETRY_S, why)
            else:
                s.awaiting[w] = victims
                s.holding[w] = slices[w]


class Bind:
    """Bindings through the pods/binding subresource, in the binder's threads."""

    def react(self, s: Parts, d: Decided) -> None:
        workloads = _admitted(d.view, d.result)
        jobs = [
            (
                d.view.pod_of(a.workload, p.pod),
                _assigned(s.policy, workloads, a, p),
            )
            for a in d.result.admissions
            if not a.after_evictions  # bound once the victims are gone
            for p in a.pods
        ]
        s.binder.bind(jobs)
        d.report.bound = len(jobs)
        for pod, _ in jobs:
            s.reporter.bound(pod)


SHARED = (SharingMode.TIME_SLICING, SharingMode.MPS)


class FractionShares:
    """Each bursting fraction's share of its GPU now, on its pod (`fraction_shares`), once
    the cycle's bindings are known: a neighbour bound beside it shrinks it."""

    def react(self, s: Parts, d: Decided) -> None:
        if not any(p.sharing in SHARED for p in s.policy.pools):
            return  # the common case: no shared GPU, no fraction
        gpus = on_gpus(s.policy, d.view, d.result)
        if gpus:
            s.share_marks.write(shares(gpus), s.pods.get)


class Reasons:
    """Every pending pod's condition and Event, and each queue's status."""

    def react(self, s: Parts, d: Decided) -> None:
        waiting = s.waiting(d.backing)
        why = {w: r.reason for w, r in s.refused.items()} | dict(d.backing)
        d.report.pending = s.reporter.pending(d.view, d.result, waiting, why)
        s.reporter.queues(s.policy, d.view, d.result, waiting, s.engine.held, s.epoch)


class Metrics:
    """The cycle's figures for Prometheus."""

    def react(self, s: Parts, d: Decided) -> None:
        outside = outside_the_cycle(s.policy, d.view, s.waiting(d.backing))
        s.metrics.observe_cycle(d.snapshot, d.result, d.took, outside)


class GroupStatus:
    """The status of the PodGroups (gpucarve's and the Workload API's) the cycle decided on."""

    def react(self, s: Parts, d: Decided) -> None:
        if POD_GROUPS not in s.served and WORKLOAD_API not in s.served:
            return
        with s.binder.lock:
            assumed = frozenset(s.assumed)
        ours = s.owners[POD_GROUPS].items() if POD_GROUPS in s.served else []
        theirs = s.owners[WORKLOAD_API].items() if WORKLOAD_API in s.served else []
        # no group objects, no copy of every pod (the reporter reads none then)
        pods = s.pods.items() if ours or theirs else []
        if POD_GROUPS in s.served:
            s.reporter.groups(ours, pods, assumed, d.result, s.epoch)
        if WORKLOAD_API in s.served:
            s.reporter.upstream_groups(theirs, pods, assumed)


class Repartition:
    """Hand the cycle's repartitions to the MIG manager (`mig_handoff`). GPUs with a slice
    held (by a pod, bound or assumed) are never changed, and a node that gets bindings this
    cycle waits for the next one: its device plugin must be up when the kubelet admits them.
    A DRA pool's node is carved at once (`MigHandoff._carve`): its partitions in use stay,
    and no device plugin restarts."""

    def react(self, s: Parts, d: Decided) -> None:
        result = d.result
        if not s.dynamic_mig or not result.repartitions:
            return  # the common case: nothing to hand over, nothing to look up
        cluster = d.view.snapshot.cluster
        pools = {n.name: n.pool for n in cluster.nodes}
        dra = {p.name for p in s.policy.pools if p.devices is DeviceApi.DRA}
        binding = {p.node for a in result.admissions for p in a.pods}
        reps = [r for r in result.repartitions if r.node not in binding or pools.get(r.node) in dra]
        if not reps:
            return
        with s.binder.lock:
            assumed = [x for a in s.assumed.values() for x in a.slices]
        inv = s.inventory()
        busy = busy_gpus(cluster, assumed, inv.reported)
        nodes = {n["metadata"]["name"]: n for n in s.nodes.items()}
        s.mig.begin(nodes, pools, inv.layouts, inv.changes, busy, reps)


class Tell:
    """Tell the observers (the dashboard) the cycle's decisions, once acted on."""

    def react(self, s: Parts, d: Decided) -> None:
        if not s.observers:
            return
        inv = s.inventory()
        changing = frozenset(
            f"{node}/gpu{g}" for node, change in inv.changes.items() for g in change.gpus
        )
        past = {g: f"{f.fault_class}: {f.reason}" for g, f in inv.held_in_service.items()}
        seen = CycleSeen(
            s.policy, d.snapshot, d.result, s.clock(), inv.unhealthy, changing,
            d.view.pending_sets, d.view.running_pods, past,
        )  # fmt: skip
        tell(s.observers, seen)


class LogLine:
    """The cycle's line in the log (at most one a while: `CycleLog`)."""

    def react(self, s: Parts, d: Decided) -> None:
        r = d.report
        s.cycle_log.cycle(s.cycles, r.bound, r.evicted, r.pending)


# In this order: evictions before bindings (a victim's slices are never handed out while it
# runs), the reasons once both are known, the observers told what was acted on.
REACTIONS: Sequence[Reaction] = (
    AskAgain(),
    IdleWarnings(),
    Evict(),
    Bind(),
    FractionShares(),
    Reasons(),
    Metrics(),
    GroupStatus(),
    Repartition(),
    Tell(),
    LogLine(),
)


def _admitted(view: View, result: CycleResult) -> dict[str, Workload]:
    """The workloads admitted this cycle (pending ones, or running ones that grew)."""
    ids = {a.workload for a in result.admissions}
    if not ids:
        return {}
    snap = view.snapshot
    out = {w.id: w for w in snap.pending if w.id in ids}
    if len(out) < len(ids):  # a running one grew: only then a pass over every running one
        out.update((r.workload.id, r.workload) for r in snap.running if r.workload.id in ids)
    return out


def _assigned(
    policy: Policy, workloads: Mapping[str, Workload], a: Admission, pod: PodAssignment
) -> Assigned:
    """The binding of one pod: for a fractional pod also what it asked (its request and
    limits, from the workload the engine admitted) and how its GPU is shared."""
    w = workloads.get(a.workload)
    ps = None if w is None else next((x for x in w.pod_sets if x.name == pod.pod_set), None)
    if ps is None or ps.gpu.kind is not GpuKind.FRACTION:
        return Assigned.placed(pod, 0, a.queue)
    flavor = policy.flavors.get(pod.flavor) if pod.flavor else None
    mps = flavor is not None and flavor.kind is SliceKind.MPS
    limits = (ps.gpu.milli_limit, ps.gpu.memory_limit_mib)
    return Assigned.placed(pod, ps.gpu.milli, a.queue, limits, mps)
