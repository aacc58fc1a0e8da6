"""GPUs held but not used: a queue's idleness rule, and how long a running workload's GPUs
have stayed below it.

A queue may declare that its work's GPUs count as idle when their activity (the DCGM
exporter's GPU utilisation, in percent, the busiest of the workload's GPUs) stays below
`activity_below`.
Idle for `warn_after_s`, the workload is *warned* (an Event, a metric, a line in explain) and
goes first among the victims reclaim and preemption would take anyway; idle for
`reclaim_after_s`, it is *reclaimable*: work waiting for its GPUs may evict it, whatever its
queue or priority, as long as its queue borrows what it holds (or the rule says work within
quota goes too). Nothing is reclaimed for nothing: an idle workload nobody waits for keeps its
GPUs.

`IdleClock` turns readings into the one fact the engine reads per workload: since when it has
been idle. Readings are the driver's (the node agent's DCGM or NVML reading in the scheduler,
the trace's model in the simulator); the engine itself never measures anything.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum


class IdleStage(StrEnum):
    ACTIVE = "active"  # busy, or idle for less than the warning window
    WARNED = "warned"  # idle past warn_after_s: warned, and taken first by reclaim/preemption
    RECLAIMABLE = "reclaimable"  # idle past reclaim_after_s: waiting work may evict it


@dataclass(frozen=True, slots=True)
class IdleRule:
    """A queue's idleness rule (policy `queues[].idleness`)."""

    activity_below: float  # percent: a GPU below this is idle
    warn_after_s: int
    reclaim_after_s: int | None  # None: warned only, never reclaimed
    within_quota: bool = False  # whether work within its queue's nominal quota is reclaimed too

    def stage(self, idle_since: int | None, now: int) -> IdleStage:
        if idle_since is None:
            return IdleStage.ACTIVE
        idle = now - idle_since
        if self.reclaim_after_s is not None and idle >= self.reclaim_after_s:
            return IdleStage.RECLAIMABLE
        if idle >= self.warn_after_s:
            return IdleStage.WARNED
        return IdleStage.ACTIVE

    def describe(self) -> str:
        out = f"GPU activity below {self.activity_below:g}% for {self.warn_after_s}s warns"
        if self.reclaim_after_s is None:
            return out + "; it is never reclaimed"
        scope = "any of its work" if self.within_quota else "its work beyond nominal quota"
        return out + f"; for {self.reclaim_after_s}s, {scope} may be reclaimed for waiting work"


class IdleClock:
    """Since when each workload's GPUs have all been below its queue's threshold, from
    readings: `observe` a workload's activity now (the most busy of its GPUs), `keep_only`
    the ones still running. A workload with no reading is not idle: absent data never reclaims."""

    def __init__(self) -> None:
        self._since: dict[str, int] = {}

    def observe(
        self,
        workload: str,
        activity: float | None,
        threshold: float,
        now: int,
        earlier: int | None = None,
    ) -> None:
        """`earlier`: since when it was idle by an earlier account (a previous scheduler's
        mark), taken when this clock has none."""
        if activity is None or activity >= threshold:
            self._since.pop(workload, None)
        else:
            start = now if earlier is None or earlier > now else earlier
            self._since.setdefault(workload, start)

    def keep_only(self, running: Iterable[str]) -> None:
        keep = set(running)
        for wid in [w for w in self._since if w not in keep]:
            del self._since[wid]

    def since(self) -> Mapping[str, int]:
        return dict(sorted(self._since.items()))
