"""Workloads: gangs of pods with GPU requests of every kind, and where they run.

A workload is admitted and placed all-or-nothing up to each pod set's `min_count`. Requests
use the names the NVIDIA device plugin advertises (`nvidia.com/gpu`, `nvidia.com/mig-<profile>`,
`nvidia.com/gpu.shared`) plus gpucarve's fractional annotations.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from gpucarve.core.amounts import FlavorName, ProfileName


class GpuKind(StrEnum):
    NONE = "none"  # CPU-only pod
    WHOLE = "whole"  # nvidia.com/gpu: n
    MIG = "mig"  # nvidia.com/mig-<profile>: n
    SHARED = "shared"  # nvidia.com/gpu.shared: n (time-slice or MPS replicas)
    FRACTION = "fraction"  # gpucarve.io/gpu-fraction and/or gpu-memory annotations


@dataclass(frozen=True, slots=True)
class GpuRequest:
    """What one pod asks of GPUs.

    `count` is GPUs (whole), instances (MIG) or replicas (shared). A fraction asks for
    `milli` thousandths of one GPU's compute and/or `memory_mib` of its memory.
    """

    kind: GpuKind = GpuKind.NONE
    count: int = 0
    profile: ProfileName | None = None
    milli: int = 0
    memory_mib: int = 0
    # a fraction's limits (0: none above its request): it may burst to them when its GPU has
    # room; admission, placement and charge read only the request
    milli_limit: int = 0
    memory_limit_mib: int = 0
    # claimed through Dynamic Resource Allocation (a ResourceClaim), so only DRA flavors
    # serve it; `flavors`: those whose devices its selectors match (empty: any)
    dra: bool = False
    flavors: tuple[FlavorName, ...] = ()

    def describe(self) -> str:
        if self.kind is GpuKind.WHOLE:
            claimed = " (DRA claim)" if self.dra else ""
            return f"{self.count} GPU{'s' if self.count != 1 else ''}{claimed}"
        if self.kind is GpuKind.MIG:
            return f"{self.count} × {self.profile}"
        if self.kind is GpuKind.SHARED:
            return f"{self.count} shared replica{'s' if self.count != 1 else ''}"
        if self.kind is GpuKind.FRACTION:
            parts = []
            if self.milli:
                up = f" (up to {self.milli_limit / 1000:g})" if self.milli_limit else ""
                parts.append(f"{self.milli / 1000:g} GPU{up}")
            if self.memory_mib:
                up = f" (up to {self.memory_limit_mib})" if self.memory_limit_mib else ""
                parts.append(f"{self.memory_mib} MiB{up}")
            return "fraction " + " + ".join(parts)
        return "no GPU"


class Operator(StrEnum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"
    GT = "Gt"  # the label's value, an integer, is greater than the one value given
    LT = "Lt"


@dataclass(frozen=True, slots=True)
class LabelRequirement:
    """One expression of a required node affinity term (all expressions must hold)."""

    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        value = labels.get(self.key)
        if self.operator is Operator.IN:
            return value is not None and value in self.values
        if self.operator is Operator.NOT_IN:
            return value is None or value not in self.values
        if self.operator is Operator.EXISTS:
            return value is not None
        if self.operator is Operator.DOES_NOT_EXIST:
            return value is None
        # Gt, Lt: as Kubernetes compares them, both sides whole numbers, else no match
        if value is None or not _is_int(value) or not _is_int(self.values[0]):
            return False
        if self.operator is Operator.GT:
            return int(value) > int(self.values[0])
        return int(value) < int(self.values[0])


def _is_int(text: str) -> bool:
    body = text[1:] if text[:1] in "+-" else text
    return body.isascii() and body.isdigit() and len(body) <= 19


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""  # empty with operator Exists tolerates every taint
    operator: str = "Equal"  # Equal | Exists
    value: str = ""
    effect: str = ""  # empty tolerates every effect

    def tolerates(self, key: str, value: str, effect: str) -> bool:
        if self.effect and self.effect != effect:
            return False
        if self.operator == "Exists":
            return not self.key or self.key == key
        return self.key == key and self.value == value


@dataclass(frozen=True, slots=True)
class PodSet:
    name: str
    count: int
    min_count: int
    gpu: GpuRequest
    cpu_milli: int = 0
    memory_mib: int = 0
    node_selector: tuple[tuple[str, str], ...] = ()
    # required node affinity: terms ORed, the expressions of a term ANDed (Kubernetes'
    # nodeSelectorTerms); empty: any node
    affinity: tuple[tuple[LabelRequirement, ...], ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    # preferred node affinity: (weight 1-100, a term of ANDed expressions); placement puts a
    # pod among the nodes whose matching terms weigh most, then scores as usual
    preferred: tuple[tuple[int, tuple[LabelRequirement, ...]], ...] = ()

    def preference(self, labels: dict[str, str]) -> int:
        """The summed weight of the preferred terms a node's labels match."""
        return sum(w for w, term in self.preferred if all(r.matches(labels) for r in term))

    def selects(self, labels: dict[str, str]) -> bool:
        """The node selector and the required affinity both hold for a node's labels."""
        if any(labels.get(k) != v for k, v in self.node_selector):
            return False
        return not self.affinity or any(
            all(req.matches(labels) for req in term) for term in self.affinity
        )


class TopologyMode(StrEnum):
    NONE = "none"
    NODE = "node"  # every pod of the workload on one node
    NVLINK = "nvlink"  # in one NVLink domain
    RACK = "rack"  # in one rack
    BLOCK = "block"  # in one block of racks (one spine switch, a cloud's topology block)


# How users name each level in messages.
TOPOLOGY_UNIT = {
    TopologyMode.NODE: "node",
    TopologyMode.NVLINK: "NVLink domain",
    TopologyMode.RACK: "rack",
    TopologyMode.BLOCK: "block",
}


@dataclass(frozen=True, slots=True)
class Workload:
    """A gang. `id` is `<namespace>/<name>`; times are integer seconds on the injected clock."""

    id: str
    queue: str
    priority_class: str
    priority: int
    preemptible: bool
    pod_sets: tuple[PodSet, ...]
    submit_time: int = 0
    topology: TopologyMode = TopologyMode.NONE
    duration: int | None = None  # for the simulator: seconds of work once running
    # Seconds a gang may stay in part placed before it is released (None: by its size).
    timeout_s: int | None = None
    # Seconds it says it runs once started (the gpucarve.io/expected-runtime annotation): a
    # claim, nothing stops it running longer, so it may only lengthen what history says
    # (core.runtime); None: learned from finished work of its kind.
    expected_runtime_s: int | None = None
    # Seconds after which it is stopped once started (a pod's activeDeadlineSeconds, which the
    # kubelet enforces): it ends by then, whatever it claims.
    runtime_limit_s: int | None = None
    # An eviction puts it back in its queue: its controller makes its pods again (the
    # simulator requeues it). False (bare pods): evicted, it is gone, so consolidation never
    # moves it.
    restartable: bool = True

    @property
    def pods(self) -> int:
        return sum(ps.count for ps in self.pod_sets)

    def pod_id(self, pod_set: str, index: int) -> str:
        return f"{self.id}/{pod_set}-{index}"


@dataclass(frozen=True, slots=True)
class PodAssignment:
    """Where one pod runs: its node and the slices it holds (several for a multi-GPU pod or
    for a fraction that takes several replicas of one GPU)."""

    pod: str
    pod_set: str
    node: str
    slice_ids: tuple[str, ...]
    flavor: FlavorName | None
    # Memory promised on a shared GPU (declared by a fractional request); 0 otherwise.
    shared_memory_mib: int = 0


@dataclass(frozen=True, slots=True)
class PartialGang:
    """A running gang short of its minimum: pods that failed or were deleted, or pods bound
    before a crash. `missing` pods are still to be placed (`rest`: the pending workload that
    asks for them, when they exist); `since`: when it fell short; `gpus`: the whole gang's."""

    missing: int
    since: int
    gpus: int
    rest: str | None = None


@dataclass(frozen=True, slots=True)
class RunningWorkload:
    workload: Workload
    pods: tuple[PodAssignment, ...]
    start_time: int
    # Set while eviction is in progress: its resources are still held, it is no candidate.
    terminating: bool = False
