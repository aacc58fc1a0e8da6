"""The simulator's allocation map: changed like a dict, and a map handed out by `frozen()`
never changes afterwards (a snapshot keeps it)."""

from __future__ import annotations

import pytest

from gpucarve.core.cluster import Allocation
from gpucarve.sim.run.allocations import Allocations


def alloc(sid: str, owner: str = "p") -> Allocation:
    return Allocation(sid, owner, 1000, 100)


def test_a_frozen_map_does_not_change_when_the_allocations_do() -> None:
    a = Allocations()
    a["s1"], a["s2"] = alloc("s1"), alloc("s2")
    first = a.frozen()
    assert dict(first) == {"s1": alloc("s1"), "s2": alloc("s2")}
    assert a.pop("s1") == alloc("s1")
    a["s3"] = alloc("s3", "q")
    assert "s1" in first and "s3" not in first and len(first) == 2  # kept as it was
    assert "s1" not in a and a["s3"].owner == "q" and len(a) == 2
    second = a.frozen()
    assert sorted(second) == ["s2", "s3"] and a.frozen() is second  # nothing changed since
    with pytest.raises(KeyError):
        del a["s1"]
    assert a.pop("s1", None) is None
    assert sorted(a) == ["s2", "s3"]
