"""What one scheduling cycle sees: the policy, the cluster, and the workloads in it.

The simulator builds it from its event state, the Kubernetes scheduler from its informer
cache. `ClusterState.allocations` and `running` must agree (every running pod's slices are
allocated to that pod); `Snapshot.check()` says where they do not.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from gpucarve.core.cluster import Allocation, ClusterState
from gpucarve.core.policy import Policy
from gpucarve.core.runtime import RuntimeBook
from gpucarve.core.usage import UsageBook
from gpucarve.core.workload import PartialGang, RunningWorkload, Workload


@dataclass(frozen=True, slots=True)
class Step:
    """One change between two snapshots: allocations removed and added, running workloads
    stopped and started (a workload that gained pods is stopped and started again)."""

    freed: tuple[Allocation, ...] = ()
    taken: tuple[Allocation, ...] = ()
    stopped: tuple[RunningWorkload, ...] = ()
    started: tuple[RunningWorkload, ...] = ()
    # The cycle result this step carries out, when it carries one out whole (`apply_in`):
    # compared by identity only. An engine that ran that cycle already holds its changes and
    # keeps them, instead of undoing them and then following the step.
    of: object | None = field(default=None, compare=False, repr=False)


class Delta:
    """How a snapshot was derived from its parent (held weakly): one step, and the parent's
    own delta. A driver that derives each snapshot from the last (the simulator) records them,
    so the engine brings its indexed cluster up to date from the snapshot it saw last in
    proportion to what changed, not to the cluster's size. The engine cuts the chain behind the
    snapshot it adopts (`forget_earlier`), so the history does not pile up."""

    __slots__ = ("earlier", "parent", "step")

    def __init__(self, parent: Snapshot, step: Step | None, earlier: Delta | None) -> None:
        self.parent = weakref.ref(parent)
        self.step = step
        self.earlier = earlier

    def steps_since(self, base: Snapshot) -> list[Step] | None:
        """The steps from `base` to this snapshot, oldest first; None if it is no ancestor."""
        out: list[Step] = []
        d: Delta | None = self
        while d is not None:
            if d.step is not None:
                out.append(d.step)
            if d.parent() is base:
                out.reverse()
                return out
            d = d.earlier
        return None

    def forget_earlier(self) -> None:
        self.earlier = None


@dataclass(frozen=True)
class Snapshot:
    policy: Policy
    cluster: ClusterState
    running: tuple[RunningWorkload, ...] = ()
    pending: tuple[Workload, ...] = ()
    delta: Delta | None = field(default=None, compare=False, repr=False)
    # When each GPU (`node/gpuN`) last had its MIG layout changed, for dynamic MIG's minimum
    # interval between changes; GPUs never changed are absent.
    mig_changed_at: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    # Running gangs short of their minimum, by workload id (only a cluster has them: the
    # simulator places gangs whole and nothing fails there in part).
    partial: Mapping[str, PartialGang] = field(default_factory=lambda: MappingProxyType({}))
    # How long finished work of each kind ran (the driver's book, as it stands): what
    # reservations judge expected ends by. Not compared: it is history, not cluster state.
    runtimes: RuntimeBook = field(default_factory=RuntimeBook, compare=False, repr=False)
    # What each queue borrowed recently, decayed (scheduling.usageHalfLifeSeconds): the
    # driver's book too, carried from each cycle's result to the next snapshot.
    usage: UsageBook = field(default_factory=UsageBook, compare=False, repr=False)
    # Since when each running workload's GPUs have stayed below its queue's idleness
    # threshold (core.held_idle.IdleClock, the driver's readings); busy work is absent.
    idle_since: Mapping[str, int] = field(
        default_factory=lambda: MappingProxyType({}), compare=False, repr=False
    )

    def delta_with(self, step: Step | None = None) -> Delta:
        """The delta of a snapshot derived from this one by `step` (none: same cluster)."""
        return Delta(self, step, self.delta)

    def check(self) -> list[str]:
        out = self.cluster.invariant_violations()
        owners: dict[str, str] = {}
        for rw in self.running:
            for pod in rw.pods:
                for sid in pod.slice_ids:
                    alloc = self.cluster.allocations.get(sid)
                    if alloc is None or alloc.owner != pod.pod:
                        out.append(f"{pod.pod} runs on {sid}, which is not allocated to it")
                    if sid in owners:
                        out.append(f"{sid} held by {owners[sid]} and {pod.pod}")
                    owners[sid] = pod.pod
        ids = [w.id for w in self.pending] + [rw.workload.id for rw in self.running]
        if len(ids) != len(set(ids)):
            out.append("a workload is listed twice (pending or running)")
        return out
