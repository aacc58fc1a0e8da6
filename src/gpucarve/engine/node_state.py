"""The engine's per-node state and the per-flavor index of free capacity, as `Working` keeps
them: mutable, changed only through `Working`'s methods, which record how to undo each change."""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import dataclass, field

from gpucarve.core.amounts import FlavorName
from gpucarve.core.policy import Flavor


@dataclass(slots=True)
class GpuSlots:
    """The free slices of one flavor on one GPU (ordinals, ascending)."""

    node: int
    gpu: int
    flavor: FlavorName
    free: list[int]
    total: int
    mem_free: int  # only meaningful for shared flavors: GPU memory not yet promised
    members: list[int] = field(default_factory=list)  # every slice of the flavor on the GPU


@dataclass(slots=True)
class NodeState:
    idx: int
    name: str
    pool: str
    labels: dict[str, str]
    taints: tuple[tuple[str, str, str], ...]
    cpu_free: int
    mem_free: int
    rack: str
    nvlink: str
    block: str
    gpus: dict[FlavorName, list[GpuSlots]] = field(default_factory=dict)


@dataclass(slots=True)
class FlavorInfo:
    flavor: Flavor
    gpu_memory: int
    charge: int
    shared: bool


class FlavorIndex:
    """Nodes bucketed by their free count of one flavor (for shared flavors: the most free
    replicas on a single GPU of the node, since a pod's replicas share one GPU).

    Each bucket is a sorted list of node indices, so the index is a function of the free
    capacity alone: the same cluster gives the same order however it was reached, which keeps
    cycles deterministic when the engine reuses its state between them.
    """

    __slots__ = ("buckets", "count", "max_count", "total")

    def __init__(self) -> None:
        self.count: dict[int, int] = {}
        self.buckets: dict[int, list[int]] = {}
        self.max_count = 0
        self.total = 0  # sum of the counts

    def set(self, node: int, value: int) -> None:
        old = self.count.get(node)
        if old == value:
            return
        self.total += value - (old or 0)
        if old is not None:
            bucket = self.buckets[old]
            del bucket[bisect.bisect_left(bucket, node)]
        self.count[node] = value
        bisect.insort(self.buckets.setdefault(value, []), node)
        self.max_count = max(self.max_count, value)

    def levels(self, n: int, descending: bool) -> Iterator[list[int]]:
        """Non-empty buckets of nodes with at least `n` free, nearest-fit first unless
        `descending`. Callers must not change the index while iterating a bucket."""
        levels = range(self.max_count, n - 1, -1) if descending else range(n, self.max_count + 1)
        for level in levels:
            bucket = self.buckets.get(level)
            if bucket:
                yield bucket
