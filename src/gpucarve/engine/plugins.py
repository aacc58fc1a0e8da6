"""Filter and score plugins for placing one pod, each small and named.

Filters answer "can this pod go on this node?" and name themselves when they say no, so a
pending reason can tell which one refused how many nodes. Scores rank the feasible candidates
(0-100 each) and a profile weighs them (`scheduling.scoring` in the policy).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpucarve.core.workload import GpuKind, PodSet
from gpucarve.engine.working import GpuSlots, NodeState

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
    labels = node.labels
    for k, v in ps.node_selector:
        if labels.get(k) != v:
            return False
    return all(req.matches(labels) for req in ps.affinity)


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


STATIC_FILTERS = (("node-selector", node_selector), ("taints", taints))


# ---------------------------------------------------------------------------- scores


def binpack(free_before: int, taken: int, total: int) -> int:
    if total <= 0:
        return 0
    return 100 * (total - (free_before - taken)) // total


def spread(free_before: int, taken: int, total: int) -> int:
    return 100 - binpack(free_before, taken, total)


def room_for_shapes(free: int, shapes: Mapping[int, int]) -> int:
    return sum(weight * (free // size) for size, weight in shapes.items() if size)


def fragmentation(free_before: int, taken: int, shapes: Mapping[int, int]) -> int:
    """100 when taking `taken` slices costs the common request shapes nothing, 0 when it
    costs them everything the node (or GPU) could still hold."""
    before = room_for_shapes(free_before, shapes)
    if before == 0:
        return 100
    after = room_for_shapes(free_before - taken, shapes)
    return 100 - 100 * (before - after) // before
