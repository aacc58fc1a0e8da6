"""Fragmentation, one measure for both drivers: free slices that no waiting request can use
where they lie. Free slices are grouped where one pod must find its slices (a node for whole
GPUs and MIG instances, one GPU for time-slice and MPS replicas); a group is stranded when
work of its flavor waits and every waiting pod of that flavor needs more slices than the
group has free. Free capacity with nothing waiting for it is idle, not fragmented. CPU and
memory are not considered. The scheduler's metrics count stranded slices per pool and flavor,
the simulator weighs them in milli-GPU per pool; both count them here."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TypeVar

from gpucarve.core.amounts import Demand, FlavorName
from gpucarve.core.cluster import Slice
from gpucarve.core.policy import Policy, SliceKind
from gpucarve.core.requests import candidate_flavors, gpu_memory_of, slices_per_pod
from gpucarve.core.workload import Workload

SHARED = (SliceKind.TIME_SLICE, SliceKind.MPS)

K = TypeVar("K")


def group_of(s: Slice) -> str:
    """Where a pod must find its slices of `s`'s kind: its GPU for shared replicas (a pod
    takes them from one GPU), its node otherwise."""
    return f"{s.node}/gpu{s.gpu}" if s.kind in SHARED else s.node


def fewest_slices(policy: Policy, w: Workload) -> Demand:
    """Per flavor that can serve a pod of `w`, the fewest slices such a pod needs."""
    out: Demand = {}
    for ps in w.pod_sets:
        for f in candidate_flavors(policy, ps.gpu):
            n = slices_per_pod(ps.gpu, f, gpu_memory_of(policy, f))
            out[f.name] = min(n, out.get(f.name, n))
    return out


def smallest_needs(needs: Iterable[Mapping[FlavorName, int]]) -> Demand:
    """Per flavor, the fewest slices any waiting pod needs (`fewest_slices` of each)."""
    out: Demand = {}
    for need in needs:
        for f, n in need.items():
            out[f] = min(n, out.get(f, n))
    return out


def stranded_slices(
    free: Iterable[tuple[K, FlavorName, int]], need: Mapping[FlavorName, int]
) -> dict[K, int]:
    """Stranded slices by key, from each group's (key, flavor, free slices): those of a group
    with some free and fewer than the smallest waiting pod of its flavor needs. Keys in the
    order their first stranded group comes."""
    out: dict[K, int] = {}
    if not need:
        return out
    for key, flavor, n in free:
        smallest = need.get(flavor)
        if smallest is not None and 0 < n < smallest:
            out[key] = out.get(key, 0) + n
    return out
