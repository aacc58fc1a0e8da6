"""The simulator's allocation map: changed in place like a dict, handed to each snapshot
without a copy.

Every event that changes the cluster derives a snapshot, and a snapshot's allocations must not
change under it. Copying a dict of every allocation each time cost 8-16 % of a simulation of
thousands of nodes (docs/simulator.md, Scale). This map keeps a persistent hash map
(`immutables.Map`, a HAMT: a change costs O(log n) and shares the rest) and an open mutation
on top of it; `frozen()` closes the mutation and returns the immutable map the snapshot keeps.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping

import immutables

from gpucarve.core.cluster import Allocation


class Allocations(MutableMapping[str, Allocation]):
    __slots__ = ("_changes", "_map")

    def __init__(self) -> None:
        self._map: immutables.Map[str, Allocation] = immutables.Map()
        self._changes: immutables.MapMutation[str, Allocation] | None = None

    def _current(self) -> immutables.Map[str, Allocation] | immutables.MapMutation[str, Allocation]:
        return self._changes if self._changes is not None else self._map

    def _open(self) -> immutables.MapMutation[str, Allocation]:
        if self._changes is None:
            self._changes = self._map.mutate()
        return self._changes

    def frozen(self) -> immutables.Map[str, Allocation]:
        """The allocations as they are now, as a map that never changes."""
        if self._changes is not None:
            self._map = self._changes.finish()
            self._changes = None
        return self._map

    def __getitem__(self, key: str) -> Allocation:
        return self._current()[key]

    def __setitem__(self, key: str, value: Allocation) -> None:
        self._open()[key] = value

    def __delitem__(self, key: str) -> None:
        del self._open()[key]

    def __contains__(self, key: object) -> bool:
        return key in self._current()

    def __iter__(self) -> Iterator[str]:
        return iter(self.frozen())  # iterating an open mutation is not offered

    def __len__(self) -> int:
        return len(self._current())
