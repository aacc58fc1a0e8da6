"""What the engine remembers about workloads from one cycle to the next.

Owned by the engine beside its working state and dropped with it (a new policy or cluster
starts both afresh): each workload's candidate flavors, its request shapes (and those of every
workload of its kind), and the flavors the idle accounting finds it could use. Kept by workload
id with the workload object itself, so a workload that changed is worked out again; the cycle
trims it, since a long-lived scheduler sees workloads come and go. Written only through these
methods.
"""

from __future__ import annotations

from collections.abc import Callable

from gpucarve.core.amounts import FlavorName
from gpucarve.core.policy import Flavor
from gpucarve.core.workload import Workload

Shapes = list[tuple[tuple[FlavorName, int], int]]  # pods per (flavor, slices per pod)
IdleFlavors = tuple[frozenset[FlavorName], frozenset[tuple[str, str]]]  # names; (model, slice kind)


class AcrossCycles:
    def __init__(self) -> None:
        self._flavors: dict[str, tuple[Workload, list[list[Flavor]]]] = {}
        self._shapes: dict[str, tuple[Workload, Shapes]] = {}
        self._kinds: dict[tuple[object, ...], Shapes] = {}
        self._idle: dict[str, tuple[Workload, IdleFlavors]] = {}

    def trim(self, limit: int) -> None:
        """Start a memo afresh once it holds more than `limit` entries."""
        for memo in (self._flavors, self._shapes, self._idle, self._kinds):
            if len(memo) > limit:
                memo.clear()

    def flavors(
        self, w: Workload, make: Callable[[Workload], list[list[Flavor]]]
    ) -> list[list[Flavor]]:
        """Per pod set, the flavors serving `w` (they depend only on the policy and `w`)."""
        hit = self._flavors.get(w.id)
        if hit is not None and hit[0] is w:
            return hit[1]
        out = make(w)
        self._flavors[w.id] = (w, out)
        return out

    def shapes(self, w: Workload, make: Callable[[Workload], Shapes]) -> Shapes:
        """`w`'s pods per (flavor, slices per pod); work of one kind (a Job's shape, submitted
        again and again) is worked out once."""
        hit = self._shapes.get(w.id)
        if hit is not None and hit[0] is w:
            return hit[1]
        kind = (w.queue, w.pod_sets)
        mine = self._kinds.get(kind)
        if mine is None:
            mine = self._kinds[kind] = make(w)
        self._shapes[w.id] = (w, mine)
        return mine

    def idle_flavors(self, w: Workload, make: Callable[[], IdleFlavors]) -> IdleFlavors:
        """The flavors waiting `w` could run on and their (model, slice kind), for the idle
        accounting (only for work whose answer does not follow the nodes' labels)."""
        hit = self._idle.get(w.id)
        if hit is not None and hit[0] is w:
            return hit[1]
        out = make()
        self._idle[w.id] = (w, out)
        return out
