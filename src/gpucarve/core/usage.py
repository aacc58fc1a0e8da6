"""Fair share over time: what each queue borrowed recently, decayed by a half-life
(`scheduling.usageHalfLifeSeconds`).

A fair share of the present moment is not fair over a day: a queue that held the whole cohort
all night is first again in the morning once its work has ended. With a half-life set, a queue's
turn is decided by what it borrows now plus what it borrowed recently, each moment's share
weighing half as much one half-life later (Slurm's and LSF's decayed usage, Kueue's admission
fair sharing). Only borrowing counts: work within a queue's own nominal quota is what the queue
is owed and costs it no turns.

The book is part of a snapshot, as the runtime book is: the engine reads it to order queues and
hands the next one back in its result (`CycleResult.usage`), so the same snapshots and times give
the same order whatever drives the cycles. The driver keeps it between cycles, and the Kubernetes
scheduler also in each Queue's status, so a restart or a new leader goes on from it.

Figures are integers in the engine's share units (`engine.quota.SCALE` squared for a share of
1, before the queue's weight): the book is compared for equality and written out, and floats
would make both depend on summation order.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


def _frozen(values: Mapping[str, int]) -> Mapping[str, int]:
    return MappingProxyType({k: v for k, v in sorted(values.items()) if v > 0})


@dataclass(frozen=True)
class UsageBook:
    """Each queue's decayed borrowed share as of `as_of`, and the share it has held since
    (what the last cycle left it borrowing), from which the next figure follows."""

    as_of: int | None = None
    decayed: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    held: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))

    def at(self, now: int, half_life_s: int) -> Mapping[str, int]:
        """The decayed share of each queue at `now`: what it stood at `as_of`, decayed over
        the time since, plus the share held meanwhile weighted by how much of a half-life ago
        it was held (a share held for ever reaches itself)."""
        if self.as_of is None or now <= self.as_of:
            return self.decayed
        keep = math.exp2(-(now - self.as_of) / half_life_s)
        out: dict[str, int] = {}
        for queue in self.decayed.keys() | self.held.keys():
            old = self.decayed.get(queue, 0)
            held = self.held.get(queue, 0)
            out[queue] = round(old * keep + held * (1.0 - keep))
        return _frozen(out)

    def moved_on(self, now: int, half_life_s: int, held: Mapping[str, int]) -> UsageBook:
        """The book at `now`, with `held` the shares held from now on."""
        return UsageBook(now, self.at(now, half_life_s), _frozen(held))

    def to_status(self, queue: str) -> dict[str, int]:
        """What a Queue's status keeps of the book (the scheduler's restart reads it back)."""
        return {
            "asOf": self.as_of or 0,
            "decayedShare": self.decayed.get(queue, 0),
            "heldShare": self.held.get(queue, 0),
        }

    @staticmethod
    def from_statuses(statuses: Mapping[str, Mapping[str, object]]) -> UsageBook:
        """The book as the Queues' statuses kept it (the latest `asOf` among them; a queue
        whose figures are missing or malformed starts from nothing, which only gives it an
        earlier turn until it borrows again)."""
        as_of = 0
        decayed: dict[str, int] = {}
        held: dict[str, int] = {}
        for queue, status in statuses.items():
            figures = [status.get(k) for k in ("asOf", "decayedShare", "heldShare")]
            ints = [x for x in figures if isinstance(x, int) and not isinstance(x, bool) and x >= 0]
            if len(ints) < len(figures):
                continue
            as_of = max(as_of, ints[0])
            decayed[queue], held[queue] = ints[1], ints[2]
        if not decayed:
            return UsageBook()
        return UsageBook(as_of, _frozen(decayed), _frozen(held))
