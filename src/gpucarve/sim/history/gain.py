"""What a policy change bought, seen on the history recorded after it: the days recorded under
the new policy replayed under the old one, against what the cluster did (and against the new
policy's own replay, so the simulator's error shows beside the gain), and against the gain
`simulate --recommend` predicted for it.

Per queue: the wait p95 (first start minus arrival, over the workloads that started) and the
runs stopped before their end (evictions, preemptions); a workload the replay never starts
counts as waiting to the end of the replay."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpucarve.sim.run.records import SimResult
from gpucarve.sim.traces.trace_io import LoadedTrace

HOUR = 3600.0


def p95(values: Sequence[float]) -> float | None:
    """The 95th percentile by nearest rank (None: no values)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered), max(1, math.ceil(0.95 * len(ordered)))) - 1]


@dataclass(frozen=True)
class Side:
    """One account of the history's workloads: per queue, their waits and stopped runs."""

    waits: Mapping[str, tuple[float, ...]]
    stops: Mapping[str, int]

    def p95_h(self, queue: str) -> float | None:
        got = p95(self.waits.get(queue, ()))
        return None if got is None else round(got / HOUR, 3)


def recorded(trace: LoadedTrace) -> Side:
    """What the cluster did: the recorded first starts and stops."""
    waits: defaultdict[str, list[float]] = defaultdict(list)
    stops: defaultdict[str, int] = defaultdict(int)
    for w in trace.workloads:
        rec = trace.recorded.get(w.id)
        if rec is None:
            continue
        if rec.starts:
            waits[w.queue].append(float(rec.starts[0] - w.submit_time))
        stops[w.queue] += len(rec.stops)
    return Side({q: tuple(v) for q, v in waits.items()}, dict(stops))


def simulated(trace: LoadedTrace, result: SimResult) -> Side:
    """A replay's account of the same workloads (one it never started waits to its end)."""
    queue_of = {w.id: w.queue for w in trace.workloads}
    waits: defaultdict[str, list[float]] = defaultdict(list)
    for w in trace.workloads:
        start = result.first_start.get(w.id, result.end)
        waits[w.queue].append(float(start - w.submit_time))
    stops: defaultdict[str, int] = defaultdict(int)
    for _, victim, _, _ in result.evictions:
        if victim in queue_of:
            stops[queue_of[victim]] += 1
    return Side({q: tuple(v) for q, v in waits.items()}, dict(stops))


def predicted(results: Mapping[str, Any]) -> dict[str, float] | None:
    """Per queue, the change of wait p95 (hours) `simulate --recommend` predicted for the
    policy it chose on its judge traces (None: the results hold no recommendation)."""
    rec = results.get("recommendation") or {}
    judged = {j.get("policy"): j for j in rec.get("judged") or [] if isinstance(j, Mapping)}
    chosen, base = judged.get(rec.get("chosen")), judged.get("the policy as read")
    if chosen is None or base is None:
        return None
    after, before = chosen.get("wait_p95_h") or {}, base.get("wait_p95_h") or {}
    return {q: round(float(after[q]) - float(before[q]), 3) for q in sorted(after) if q in before}


def _delta(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(a - b, 3)


def gain(
    seen: Side, old: Side, new: Side, forecast: Mapping[str, float] | None
) -> list[dict[str, Any]]:
    """Per queue: the recorded wait p95 (under the new policy), the replays' under the old and
    the new, the gain seen (recorded minus old, and new minus old: both replays, so the
    simulator's own error cancels), the gain predicted, and the stopped runs of each."""
    rows = []
    for q in sorted(set(seen.waits) | set(old.waits)):
        rec, was, now = seen.p95_h(q), old.p95_h(q), new.p95_h(q)
        rows.append(
            {
                "queue": q,
                "recorded_wait_p95_h": rec,
                "old_policy_wait_p95_h": was,
                "new_policy_wait_p95_h": now,
                "seen_change_h": _delta(rec, was),
                "replayed_change_h": _delta(now, was),
                "predicted_change_h": None if forecast is None else forecast.get(q),
                "recorded_stops": seen.stops.get(q, 0),
                "old_policy_stops": old.stops.get(q, 0),
                "new_policy_stops": new.stops.get(q, 0),
            }
        )
    return rows
