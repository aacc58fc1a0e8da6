"""Slices per pool and flavor after a cycle: allocated, free, and fragmented — free slices that
no waiting request shape can use where they are (on a node with fewer free than the smallest
waiting pod of that flavor needs; on one GPU for shared replicas, which a pod takes from one
GPU). With nothing waiting for a flavor, none of its free slices count as fragmented."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from gpucarve.core.amounts import Demand, FlavorName
from gpucarve.core.snapshot import Snapshot
from gpucarve.engine import (
    allocated_after,
    fewest_slices,
    group_of,
    smallest_needs,
    stranded_slices,
)
from gpucarve.engine.decisions import CycleResult


@dataclass
class Counts:
    allocated: int = 0
    free: int = 0
    fragmented: int = 0


def _smallest_waiting(snapshot: Snapshot, result: CycleResult) -> Demand:
    waiting = {p.workload for p in result.pending}
    policy = snapshot.policy
    return smallest_needs(fewest_slices(policy, w) for w in snapshot.pending if w.id in waiting)


def pool_slices(snapshot: Snapshot, result: CycleResult) -> dict[tuple[str, FlavorName], Counts]:
    cluster = snapshot.cluster
    held = allocated_after(snapshot, result)
    pool_of = {n.name: n.pool for n in cluster.nodes}
    out: dict[tuple[str, FlavorName], Counts] = {}
    free_at: Counter[tuple[str, FlavorName, str]] = Counter()  # (pool, flavor, node or GPU) -> free
    for sid, s in cluster.slices.items():
        key = (pool_of[s.node], s.flavor)
        counts = out.setdefault(key, Counts())
        if sid in held:
            counts.allocated += 1
            continue
        counts.free += 1
        free_at[(*key, group_of(s))] += 1
    groups = (((pool, flavor), flavor, n) for (pool, flavor, _), n in free_at.items())
    for key, n in stranded_slices(groups, _smallest_waiting(snapshot, result)).items():
        out[key].fragmented = n
    return out
