"""Quantities the engine counts: names that say what a count is keyed by, and a bound with an
explicit "no limit".

A flavor (`FlavorName`) and a quota key (`QuotaKey`: a flavor, or a GPU unit counting every
flavor of one model in parts of a GPU) are both strings on the wire, and the engine keeps
counts by each; typed apart, a count per flavor cannot be read as a count per quota key (or
the other way round) without a conversion the reader can see (`as_key`: a flavor's own quota
key). `Bound` replaces `int | None` and large sentinels: "unlimited" is a value, and the
arithmetic that needs an integer asks for one (`or_int`) where it is done.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, NewType

FlavorName = NewType("FlavorName", str)
QuotaKey = NewType("QuotaKey", str)
# A MIG profile (`3g.40gb`): what the MIG planner counts instances by.
ProfileName = NewType("ProfileName", str)

# What `Bound.or_int` gives for no limit: past any quantity a node or a quota holds (the
# quantity parser caps those far lower: core.quantity.MAX_*), far enough inside int64 that
# taking a node's worth of requests from it, or giving them back, stays exact.
NO_LIMIT_INT: Final = 1 << 62


def as_key(flavor: FlavorName) -> QuotaKey:
    """A flavor as the quota key that counts it alone (a quota keyed by the flavor)."""
    return QuotaKey(flavor)


def as_flavor(key: QuotaKey) -> FlavorName:
    """A quota key as the flavor it names, where it names one (not a GPU unit's)."""
    return FlavorName(key)


@dataclass(frozen=True, slots=True)
class Bound:
    """At most `most` of something, or no limit at all (`most` None: `UNLIMITED`)."""

    most: int | None = None

    @staticmethod
    def at(n: int) -> Bound:
        return Bound(n)

    @property
    def unlimited(self) -> bool:
        return self.most is None

    def exceeded_by(self, n: int) -> bool:
        """Whether `n` is past the bound (never, without one)."""
        return self.most is not None and n > self.most

    def cap(self, n: int) -> int:
        """`n`, or the bound where `n` is past it."""
        return n if self.most is None or n <= self.most else self.most

    def or_else(self, n: int) -> int:
        """The bound, or `n` where there is none (a lending limit defaults to nominal)."""
        return n if self.most is None else self.most

    def or_int(self) -> int:
        """The bound as an integer for arithmetic kept in ints (a hot loop, a numpy array):
        `NO_LIMIT_INT` for no limit."""
        return NO_LIMIT_INT if self.most is None else self.most

    def plus(self, n: int) -> Bound:
        """The bound moved up by `n` (no limit stays none)."""
        return self if self.most is None else Bound(self.most + n)

    def text(self, fmt: Callable[[int], str] = str, none: str = "-") -> str:
        return none if self.most is None else fmt(self.most)


UNLIMITED: Final = Bound()

# Slices per flavor: what a workload needs, or what is free.
Demand = dict[FlavorName, int]
