"""Filter and score plugins for placing one pod, each small and named, behind one interface
per extension point (as the Kubernetes scheduler framework has them).

A `FilterPlugin` answers "can this pod go on this node?" and names itself when it says no, so
a pending reason can tell which one refused how many nodes. A `ScorePlugin` ranks the feasible
candidates (0-100) and the policy's profile weighs them (`scheduling.scoring`): a new filter or
score is a new class and an entry in `STATIC_FILTERS` or `SCORES`, not an edit of the placer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Protocol

from gpucarve.core.policy import ScoringWeights
from gpucarve.core.workload import GpuKind, PodSet
from gpucarve.engine.node_state import GpuSlots, NodeState

GPU_TAINT_KEYS = ("nvidia.com/gpu",)


@dataclass(frozen=True, slots=True)
class PodNeeds:
    """One pod's needs once its flavor is chosen."""

    pod_set: PodSet
    flavor: str | None
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


class NodeSelector:
    name: ClassVar[str] = "node-selector"

    def filter(self, ps: PodSet, node: NodeState) -> bool:
        return node_selector(ps, node)


class Taints:
    name: ClassVar[str] = "taints"

    def filter(self, ps: PodSet, node: NodeState) -> bool:
        return taints(ps, node)


STATIC_FILTERS: tuple[FilterPlugin, ...] = (NodeSelector(), Taints())


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
    name: ClassVar[str] = "fragmentation"

    def score(self, free: int, taken: int, total: int, shapes: Mapping[int, int] | None) -> int:
        # without the shapes asked for there is nothing to strand: no opinion
        return fragmentation(free, taken, total, shapes) if shapes else 0


SCORES: tuple[ScorePlugin, ...] = (Binpack(), Spread(), Fragmentation())


def profile(weights: ScoringWeights) -> tuple[tuple[int, ScorePlugin], ...]:
    """The score plugins a profile weighs, with their weights (a weight of 0 leaves one out)."""
    by_name = {"binpack": weights.binpack, "spread": weights.spread,
               "fragmentation": weights.fragmentation}  # fmt: skip
    return tuple((by_name[p.name], p) for p in SCORES if by_name.get(p.name))
