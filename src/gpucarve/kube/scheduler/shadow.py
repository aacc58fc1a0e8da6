"""Shadow mode: the same loop beside a cluster's real scheduler, changing nothing.

`gpucarve scheduler --shadow` observes and decides as it would on its own cluster, for the pods
another scheduler binds (its `--name` is that scheduler's, `default-scheduler` by default), and
reacts with `SHADOW_REACTIONS` only: no binding, eviction, condition, Event, status or MIG
change. Two guarantees, not one: the reactions that write are not in the list, and the client
is `ReadOnlyClient`, which sends reads and never a write (a part of the loop outside the
reactions that would write, such as node labels or the MIG configurations, has its write
withheld and counted). What it would have done is kept by `WouldStart` (the first cycle at which
the engine would have started each workload) and written into the history beside when the
workload really started (`Recorder`)."""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from gpucarve.kube.api.client import Client
from gpucarve.kube.scheduler.reactions import (
    AskAgain,
    Decided,
    LogLine,
    Metrics,
    Parts,
    Reaction,
    Tell,
)

log = logging.getLogger("gpucarve.scheduler")
READS = frozenset({"GET"})


def _kind(path: str) -> str:
    """The kind of object a path names (`pods/binding`, `events`, `nodes`...), for counting."""
    parts = [p for p in path.split("?", 1)[0].split("/") if p]
    if "namespaces" in parts:
        i = parts.index("namespaces")
        parts = parts[i + 2 :] if len(parts) > i + 2 else parts[i:]
    else:
        parts = parts[2:] if parts[:1] == ["api"] else parts[3:]
    # a kind and, past the object's name, its subresource
    return parts[0] if len(parts) < 3 else f"{parts[0]}/{parts[2]}"


@dataclass
class ReadOnlyClient(Client):
    """A client that reads and never writes: a write is counted by method and kind, logged
    once per kind, and answered with nothing."""

    withheld: Counter[str] = field(default_factory=Counter)

    @classmethod
    def of(cls, client: Client) -> ReadOnlyClient:
        shared = {f.name: getattr(client, f.name) for f in fields(client) if f.name != "_local"}
        return cls(**shared)

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
        *,
        busy_is_answer: bool = False,
    ) -> Any:
        if method in READS:
            return super().call(method, path, body, content_type, busy_is_answer=busy_is_answer)
        what = f"{method} {_kind(path)}"
        if what not in self.withheld:
            log.info("shadow: withheld %s (and every later one of its kind)", what)
        self.withheld[what] += 1
        return None


@dataclass(frozen=True)
class Ahead:
    """A workload the shadow would have started that still waits on the cluster."""

    queue: str
    slices: int


class WouldStart:
    """The first cycle (Unix second) at which the engine would have started each workload:
    its pods bound at once, or once the victims it asked for had gone (`after_evictions`).
    For the metrics: the slices of the work it would run that still waits, by queue, the
    slice-seconds they wait, and, once the real scheduler starts one, how much sooner the
    shadow would have."""

    def __init__(self) -> None:
        self.first: dict[str, int] = {}
        self.evictions = 0  # pods the shadow would have evicted, over all cycles
        self.ahead: dict[str, Ahead] = {}  # as of the last cycle
        self.last: int | None = None
        self.lock = threading.Lock()
        # since the shadow started, by queue: the slice-seconds work it would have run waited,
        # and the workloads the real scheduler started later than it would have, with how much
        self.waited: Counter[str] = Counter()
        self.leads: dict[str, list[int]] = {}

    def react(self, s: Parts, d: Decided) -> None:
        now = int(s.clock().timestamp())
        with self.lock:
            for a in d.result.admissions:
                self.first.setdefault(a.workload, now)
            self.evictions += len(d.result.evictions)
            self._measure(s, d, now)

    def _measure(self, s: Parts, d: Decided, now: int) -> None:
        m = s.metrics
        if self.last is not None:
            for w in self.ahead.values():
                waited = w.slices * max(0, now - self.last)
                m.shadow_ahead_seconds.labels(w.queue).inc(waited)
                self.waited[w.queue] += waited
        running = {r.workload.id for r in d.snapshot.running}
        for wid, w in self.ahead.items():
            if wid in running and wid in self.first:
                lead = max(0, now - self.first[wid])
                m.shadow_lead.labels(w.queue).observe(lead)
                self.leads.setdefault(w.queue, []).append(lead)
        self.ahead = {
            a.workload: Ahead(a.queue, sum(n for _, n in a.charged)) for a in d.result.admissions
        }
        totals: dict[str, int] = {q.name: 0 for q in s.policy.queues}
        for w in self.ahead.values():
            totals[w.queue] = totals.get(w.queue, 0) + w.slices
        for queue, slices in totals.items():
            m.shadow_ahead.labels(queue).set(slices)
        self.last = now

    def of(self, workload: str) -> int | None:
        with self.lock:
            return self.first.get(workload)

    def summary(self) -> dict[str, object]:
        """The running difference, for the dashboard: per queue, the slices of work the
        shadow would run now that still wait, the slice-hours such work has waited, and the
        workloads started later than the shadow would have (how many, and the mean and the
        largest lead)."""
        with self.lock:
            now: Counter[str] = Counter()
            for w in self.ahead.values():
                now[w.queue] += w.slices
            queues = sorted(set(now) | set(self.waited) | set(self.leads))
            rows = []
            for q in queues:
                leads = self.leads.get(q, [])
                rows.append({
                    "queue": q,
                    "aheadSlices": now[q],
                    "waitedSliceHours": round(self.waited[q] / 3600, 3),
                    "startedLater": len(leads),
                    "meanLeadSeconds": round(sum(leads) / len(leads), 1) if leads else None,
                    "maxLeadSeconds": max(leads, default=None),
                })  # fmt: skip
            return {"queues": rows, "wouldHaveEvicted": self.evictions}

    def forget(self, workload: str) -> None:
        with self.lock:
            self.first.pop(workload, None)


def shadow_reactions(would: WouldStart) -> Sequence[Reaction]:
    """What a shadow does with a cycle: keep what it would have started, count for the metrics,
    tell the dashboard, log; never act."""
    return (AskAgain(), would, Metrics(), Tell(), LogLine())
