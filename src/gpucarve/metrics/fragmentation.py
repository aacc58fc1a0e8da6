"""Slices per pool and flavor after a cycle: allocated, free, and fragmented — free slices that
no waiting request shape can use where they are (on a node with fewer free than the smallest
waiting pod of that flavor needs; on one GPU for shared replicas, which a pod takes from one
GPU). With nothing waiting for a flavor, none of its free slices count as fragmented."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from gpucarve.core.policy import SliceKind
from gpucarve.core.requests import candidate_flavors, gpu_memory_of, slices_per_pod
from gpucarve.core.snapshot import Snapshot
from gpucarve.engine import allocated_after
from gpucarve.engine.decisions import CycleResult

SHARED = (SliceKind.TIME_SLICE, SliceKind.MPS)


@dataclass
class Counts:
    allocated: int = 0
    free: int = 0
    fragmented: int = 0


def _smallest_waiting(snapshot: Snapshot, result: CycleResult) -> dict[str, int]:
    policy = snapshot.policy
    waiting = {p.workload for p in result.pending}
    smallest: dict[str, int] = {}
    for w in snapshot.pending:
        if w.id not in waiting:
            continue
        for ps in w.pod_sets:
            for f in candidate_flavors(policy, ps.gpu):
                n = slices_per_pod(ps.gpu, f, gpu_memory_of(policy, f))
                smallest[f.name] = min(n, smallest.get(f.name, n))
    return smallest


def pool_slices(snapshot: Snapshot, result: CycleResult) -> dict[tuple[str, str], Counts]:
    cluster = snapshot.cluster
    held = allocated_after(snapshot, result)
    pool_of = {n.name: n.pool for n in cluster.nodes}
    out: dict[tuple[str, str], Counts] = {}
    free_at: Counter[tuple[str, str, str]] = Counter()  # (pool, flavor, node or GPU) -> free
    for sid, s in cluster.slices.items():
        key = (pool_of[s.node], s.flavor)
        counts = out.setdefault(key, Counts())
        if sid in held:
            counts.allocated += 1
            continue
        counts.free += 1
        where = f"{s.node}/gpu{s.gpu}" if s.kind in SHARED else s.node
        free_at[(*key, where)] += 1
    smallest = _smallest_waiting(snapshot, result)
    for (pool, flavor, _), free in free_at.items():
        need = smallest.get(flavor)
        if need is not None and free < need:
            out[(pool, flavor)].fragmented += free
    return out
