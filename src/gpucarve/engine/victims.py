"""Who preemption and reclaim take first: what one eviction takes (`Victim`) and the orders
candidate victims are tried in (`VictimOrder`), with the registry the policy names one from
(`scheduling.victimOrder`). Light on purpose (the working state only as a type): the policy's
check reads the registry's names without loading the engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Protocol

from gpucarve.core.policy import DEFAULT_VICTIM_ORDER
from gpucarve.core.workload import PodAssignment, RunningWorkload, Workload

if TYPE_CHECKING:
    from gpucarve.engine.working import Working


@dataclass(frozen=True, slots=True)
class Victim:
    """What one eviction takes: the surplus pods of an elastic gang (`pods`), or whatever the
    workload still runs (`pods` empty: the whole gang)."""

    rw: RunningWorkload
    pods: tuple[PodAssignment, ...] = ()

    @property
    def whole(self) -> bool:
        return not self.pods

    @property
    def workload(self) -> Workload:
        return self.rw.workload

    @property
    def held(self) -> tuple[PodAssignment, ...]:
        return self.pods or self.rw.pods


def _lost(ws: Working, pods: tuple[PodAssignment, ...], start: int, now: int) -> int:
    charge = sum(ws.flavors[p.flavor].charge * len(p.slice_ids) for p in pods if p.flavor)
    return max(0, now - start) * charge


class VictimOrder(Protocol):
    """Which candidate victims are tried first (smallest key first): the policy of what
    preemption and reclaim may destroy. A new order is a new class and a line in
    `VICTIM_ORDERS`; the policy names it (`scheduling.victimOrder`).
    A key is worked out once per running workload and cycle (again if the workload changes), so
    it may read the victim, `now` and what does not change in a cycle (flavors, nodes), not
    the working state's usage."""

    name: ClassVar[str]

    def key(self, v: Victim, ws: Working, now: int) -> tuple[object, ...]: ...


class CheapestFirst:
    """Lowest priority first; a surplus pod before a whole gang; then the least GPU-time
    lost; then the newest."""

    name: ClassVar[str] = DEFAULT_VICTIM_ORDER

    def key(self, v: Victim, ws: Working, now: int) -> tuple[object, ...]:
        return (
            v.workload.priority,
            v.whole,
            _lost(ws, v.held, v.rw.start_time, now),
            -v.rw.start_time,
            -v.workload.submit_time,
            v.workload.id,
        )


# The registry of victim orders: the policy names one of them (scheduling.victimOrder).
VICTIM_ORDERS: tuple[VictimOrder, ...] = (CheapestFirst(),)


def victim_order_names() -> tuple[str, ...]:
    """The names `scheduling.victimOrder` may give (the registry as it is now)."""
    return tuple(o.name for o in VICTIM_ORDERS)


def victim_order(name: str) -> VictimOrder:
    """The registered order of that name (the policy was checked against the registry)."""
    for o in VICTIM_ORDERS:
        if o.name == name:
            return o
    raise KeyError(f"no victim order {name!r} (registered: {', '.join(victim_order_names())})")
