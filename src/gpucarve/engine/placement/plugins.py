"""Filter and score plugins for placing one pod, each small and named, behind one interface
per extension point (as the Kubernetes scheduler framework has them).

A `FilterPlugin` answers "can this pod go on this node?" and names itself when it says no, so
a pending reason can tell which one refused how many nodes. A `ScorePlugin` ranks the feasible
candidates (0-100) and the policy's profile weighs them by name (`scheduling.scoring`). A new
filter or score is a new class and an entry in `STATIC_FILTERS`, `NODE_FILTERS` or `SCORES`,
not an edit of the placer; the policy may weigh a score as soon as the registry lists it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Protocol

from gpucarve.core.amounts import FlavorName
from gpucarve.core.policy import ScoringWeights
from gpucarve.core.workload import GpuKind, PodSet
from gpucarve.engine.decisions import Plugin
from gpucarve.engine.node_state import GpuSlots, NodeState

GPU_TAINT_KEYS = ("nvidia.com/gpu",)


@dataclass(frozen=True, slots=True)
class PodNeeds:
    """One pod's needs once its flavor is chosen."""

    pod_set: PodSet
    flavor: FlavorName | None
    slices: int  # slices of `flavor` on one node (whole GPUs, MIG instances, replicas)
    shared: bool  # replicas: all `slices` on one GPU, with `shared_mem` promised on it
    shared_mem: int
    cpu: int
    mem: int


# ---------------------------------------------------------------------------- filters


def node_selector(ps: PodSet, node: NodeState) -> bool:
    return ps.selects(node.labels)


def taints(ps: PodSet, node: NodeState) -> bool:
    wants_gpu = ps.gpu.kind is not GpuKind.NONE
    for key, value, effect in node.taints:
        if effect == "PreferNoSchedule":
            continue
        # As Kubernetes' ExtendedResourceToleration admission plugin does for extended
        # resources, a pod that asks for an NVIDIA GPU tolerates the GPU taint.
        if wants_gpu and key in GPU_TAINT_KEYS:
            continue
        if not any(t.tolerates(key, value, effect) for t in ps.tolerations):
            return False
    return True


def cpu_memory(needs: PodNeeds, node: NodeState) -> bool:
    return node.cpu_free >= needs.cpu and node.mem_free >= needs.mem


def shared_gpu(needs: PodNeeds, node: NodeState) -> GpuSlots | None:
    """The fullest GPU that still has the pod's replicas and declared memory free."""
    best: GpuSlots | None = None
    assert needs.flavor is not None
    for g in node.gpus.get(needs.flavor, ()):
        fits = len(g.free) >= needs.slices and g.mem_free >= needs.shared_mem
        if fits and (best is None or len(g.free) < len(best.free)):
            best = g
    return best


class FilterPlugin(Protocol):
    """A node check that depends on the pod set and the node's fixed facts (labels, taints)
    only: its verdict is kept per pod set and node for the cycle."""

    name: ClassVar[str]

    def filter(self, ps: PodSet, node: NodeState) -> bool: ...


class Placing(Protocol):
    """What a node filter may ask of the placement in progress."""

    def holds_any(self) -> bool:
        """Whether a waiting gang's reservation holds any node this cycle."""
        ...

    def kept_from(self, node: NodeState, needs: PodNeeds) -> bool:
        """Whether a reservation keeps the workload being placed off `node`."""
        ...


class NodeFilter(Protocol):
    """A node check that reads what changes as pods are placed (free CPU, a GPU's free memory,
    the holds of reservations): asked afresh for every candidate node. `applies` is asked once
    per pod: a filter with nothing to check for it is not asked per node. `admits` answers
    yes, no, or yes on one GPU (a shared pod's replicas must all be on one GPU). `reason`: the
    pending reason's plugin when this filter kept the pod off a node (None: the placement's
    own, gpu-slices or cpu-memory). `batched`: the fragmentation model's batch scoring applies
    this check itself (over all candidates at once); the placer asks a filter that is not
    batched of the node the model picks, and the model picks again without a node it refuses."""

    name: ClassVar[str]
    reason: ClassVar[Plugin | None]
    batched: ClassVar[bool]

    def applies(self, needs: PodNeeds, placing: Placing) -> bool: ...

    def admits(self, needs: PodNeeds, node: NodeState, placing: Placing) -> bool | GpuSlots: ...


class NodeSelector:
    name: ClassVar[str] = Plugin.NODE_SELECTOR

    def filter(self, ps: PodSet, node: NodeState) -> bool:
        return node_selector(ps, node)


class Taints:
    name: ClassVar[str] = Plugin.TAINTS

    def filter(self, ps: PodSet, node: NodeState) -> bool:
        return taints(ps, node)


class Reserved:
    """A waiting gang's reservation keeps newer or lower-priority work off the nodes it holds
    (engine.reservation)."""

    name: ClassVar[str] = Plugin.RESERVATION
    reason: ClassVar[Plugin | None] = Plugin.RESERVATION
    batched: ClassVar[bool] = True

    def applies(self, needs: PodNeeds, placing: Placing) -> bool:
        return needs.flavor is not None and placing.holds_any()

    def admits(self, needs: PodNeeds, node: NodeState, placing: Placing) -> bool | GpuSlots:
        return not placing.kept_from(node, needs)


class CpuMemory:
    name: ClassVar[str] = Plugin.CPU_MEMORY
    reason: ClassVar[Plugin | None] = None
    batched: ClassVar[bool] = True

    def applies(self, needs: PodNeeds, placing: Placing) -> bool:
        return True

    def admits(self, needs: PodNeeds, node: NodeState, placing: Placing) -> bool | GpuSlots:
        return cpu_memory(needs, node)


class GpuMemory:
    """A shared pod's replicas and declared memory on one GPU: the fullest that has them."""

    name: ClassVar[str] = Plugin.GPU_MEMORY
    reason: ClassVar[Plugin | None] = None
    batched: ClassVar[bool] = True

    def applies(self, needs: PodNeeds, placing: Placing) -> bool:
        return needs.shared

    def admits(self, needs: PodNeeds, node: NodeState, placing: Placing) -> bool | GpuSlots:
        gpu = shared_gpu(needs, node)
        return False if gpu is None else gpu


# The registries: a new filter is a class and a line in one of them (in the order asked; the
# first to refuse a node is the one counted).
STATIC_FILTERS: tuple[FilterPlugin, ...] = (NodeSelector(), Taints())
NODE_FILTERS: tuple[NodeFilter, ...] = (Reserved(), CpuMemory(), GpuMemory())


# ---------------------------------------------------------------------------- scores


def binpack(free_before: int, taken: int, total: int) -> int:
    if total <= 0:
        return 0
    return 100 * (total - (free_before - taken)) // total


def spread(free_before: int, taken: int, total: int) -> int:
    return 100 - binpack(free_before, taken, total)


def stranded(free: int, shapes: Mapping[int, int]) -> int:
    """Free slices the common request shapes cannot use, weighted by how often each shape is
    asked for (times the total weight): what is left over after packing each shape."""
    return sum(weight * (free % size) for size, weight in shapes.items() if size)


def fragmentation(free_before: int, taken: int, total: int, shapes: Mapping[int, int]) -> int:
    """In the spirit of fragmentation gradient descent: 50 when taking `taken` slices leaves
    as much stranded capacity as before, towards 100 when it strands less (fills a gap), towards
    0 when it strands more (breaks up room that a common shape needed)."""
    weight = sum(w for s, w in shapes.items() if s)
    if not weight or total <= 0:
        return 50
    delta = stranded(free_before - taken, shapes) - stranded(free_before, shapes)
    return max(0, min(100, 50 - 100 * delta // (weight * total)))


class ScorePlugin(Protocol):
    """How good a node is for a pod that takes `taken` of the `free` slices of its flavor there
    (of `total`); `shapes`: the cycle's request shapes of that flavor (slices per pod ->
    pods)."""

    name: ClassVar[str]

    def score(self, free: int, taken: int, total: int, shapes: Mapping[int, int] | None) -> int: ...


class Binpack:
    name: ClassVar[str] = "binpack"

    def score(self, free: int, taken: int, total: int, shapes: Mapping[int, int] | None) -> int:
        return binpack(free, taken, total)


class Spread:
    name: ClassVar[str] = "spread"

    def score(self, free: int, taken: int, total: int, shapes: Mapping[int, int] | None) -> int:
        return spread(free, taken, total)


class Fragmentation:
    """Per node, as a fallback: where the fragmentation model weighs a flavor (whole GPUs,
    shared GPUs, no GPU), its batch form (`frag_place.ModelPlacer`) ranks every candidate
    node at once under this same weight and is asked first."""

    name: ClassVar[str] = "fragmentation"

    def score(self, free: int, taken: int, total: int, shapes: Mapping[int, int] | None) -> int:
        # without the shapes asked for there is nothing to strand: no opinion
        return fragmentation(free, taken, total, shapes) if shapes else 0


# The registry of scores, in the order they are added up: a new score is a class and a line
# here; the policy weighs it by name (`scheduling.scoring`, checked against these names).
SCORES: tuple[ScorePlugin, ...] = (Binpack(), Spread(), Fragmentation())


def score_names() -> tuple[str, ...]:
    """The names the policy's `scheduling.scoring` may weigh (the registry as it is now)."""
    return tuple(p.name for p in SCORES)


def profile(weights: ScoringWeights) -> tuple[tuple[int, ScorePlugin], ...]:
    """The score plugins a profile weighs, with their weights (a weight of 0 leaves one out)."""
    return tuple((weights[p.name], p) for p in SCORES if weights[p.name])
