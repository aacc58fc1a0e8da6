"""The history recorder: a reaction that keeps what the cluster did with every workload that
asks for GPUs, whoever binds it (gpucarve, kube-scheduler, another scheduler), as lines of the
simulator's trace format (`sim/traces/recorded.py`) in a bounded store (`sim/history/store`).

It reads the pod informer's changes since the cycle before (no pass over every pod), and from
the pods alone: a workload is the pods of one group (`group_key`), it arrives when its first pod
is created, starts when its last running pod is bound (the `PodScheduled` condition's time, as
the API server wrote it), stops when a pod of a run goes before the workload ended (with the
`DisruptionTarget` condition's reason where the evicter wrote one), and ends when no pod of it is
left running or waiting. A group stays open `linger_s` after its last pod ended: a controller's
replacement pod of an evicted one belongs to the same workload. Times are Unix seconds."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gpucarve.core.vocabulary import TERMINAL_PHASES
from gpucarve.kube.scheduler.reactions import Decided, Parts
from gpucarve.kube.view.pods.pod_index import asks_gpus
from gpucarve.kube.view.pods.pods import group_key, recorded_doc
from gpucarve.sim.history.export import jsonl
from gpucarve.sim.history.store import HistoryStore
from gpucarve.sim.traces.recorded import Recorded, Stop

UNIX = datetime(1970, 1, 1, tzinfo=UTC)
LINGER_S = 60
MAX_OPEN = 200_000  # workloads open at once: past it the oldest is written as it stands


def unix(stamp: object) -> int | None:
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        return int(datetime.fromisoformat(stamp).timestamp())
    except ValueError:
        return None


def _condition(pod: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if isinstance(c, Mapping) and c.get("type") == kind and c.get("status") == "True":
            return c
    return None


def _bound_at(pod: Mapping[str, Any], now: int) -> int | None:
    if not (pod.get("spec") or {}).get("nodeName"):
        return None
    scheduled = _condition(pod, "PodScheduled")
    at = unix(scheduled.get("lastTransitionTime")) if scheduled else None
    return now if at is None else at


def _finished_at(pod: Mapping[str, Any], now: int) -> int:
    ends = [
        t
        for s in (pod.get("status") or {}).get("containerStatuses") or []
        if isinstance(s, Mapping)
        and (t := unix(((s.get("state") or {}).get("terminated") or {}).get("finishedAt")))
        is not None
    ]
    return max(ends) if ends else now


def _cause(pod: Mapping[str, Any]) -> str:
    c = _condition(pod, "DisruptionTarget")
    if c is None:
        return "deleted"
    return ": ".join(str(x) for x in (c.get("reason"), c.get("message")) if x)


@dataclass
class Workload:
    """One group's story so far."""

    namespace: str
    name: str
    members: dict[str, Mapping[str, Any]] = field(default_factory=dict)  # pod -> last seen
    live: dict[str, int | None] = field(default_factory=dict)  # pod running or waiting -> bound
    ended: dict[str, tuple[int, str]] = field(default_factory=dict)  # pod -> (when, how)
    starts: list[int] = field(default_factory=list)
    stops: list[Stop] = field(default_factory=list)
    running: bool = False
    nodes: dict[str, str] = field(default_factory=dict)  # pod of the last run -> node
    scheduler: str = ""
    closed_at: int | None = None
    arrived: int | None = None  # its first pod's creation (a replacement's is later)

    def seen(self, key: str, pod: Mapping[str, Any], now: int) -> None:
        self.members[key] = pod
        created = unix(pod["metadata"].get("creationTimestamp"))
        if created is not None and (self.arrived is None or created < self.arrived):
            self.arrived = created
        self.scheduler = (pod.get("spec") or {}).get("schedulerName") or "default-scheduler"
        phase = (pod.get("status") or {}).get("phase")
        if phase in TERMINAL_PHASES:
            if key not in self.ended:
                # a pod that ran and ended between two cycles ran all the same
                if (ran := _bound_at(pod, now)) is not None and self.live.get(key) is None:
                    self.live[key] = ran
                    self.nodes[key] = str(pod["spec"]["nodeName"])
                    self._maybe_started()
                self._end(key, _finished_at(pod, now), str(phase), _cause(pod))
            return
        self.closed_at = None
        self.ended.pop(key, None)  # a pod made again under the same name (a Job's retry)
        bound = _bound_at(pod, now)
        self.live[key] = bound
        if bound is not None:
            self.nodes[key] = str(pod["spec"]["nodeName"])
        self._maybe_started()

    def gone(self, key: str, now: int) -> None:
        if key in self.live:
            pod = self.members.get(key, {})
            self._end(key, now, "Deleted", _cause(pod))

    def _maybe_started(self) -> None:
        times = list(self.live.values())
        if not times or any(t is None for t in times):
            return
        last = max(t for t in times if t is not None)
        if not self.running:
            self.running = True
            self.starts.append(last)
            self.nodes = {k: v for k, v in self.nodes.items() if k in self.live}
        elif last > self.starts[-1]:
            self.starts[-1] = last  # a pod of the same run bound later: whole from then

    def _end(self, key: str, at: int, how: str, cause: str) -> None:
        self.live.pop(key, None)
        self.ended[key] = (at, how)
        if self.running and how != "Succeeded" and self.live:
            # a pod of a run went while the rest still run: the run stopped, the rest follow
            self.stops.append(Stop(at, cause))
            self.running = False
        elif self.running and how not in ("Succeeded", "Failed") and not self.live:
            self.stops.append(Stop(at, cause))
            self.running = False
        if not self.live:
            self.closed_at = at
            self.running = False

    def outcome(self) -> str:
        if self.live:
            return "Running" if self.running else "Pending"
        hows = {how for _, how in self.ended.values()}
        if "Failed" in hows:
            return "Failed"
        return "Succeeded" if hows == {"Succeeded"} else "Deleted"

    def line(self, now: int, would_start: int | None = None) -> dict[str, Any]:
        """This workload as a trace line (its duration: its last run's, or so far), with when
        a shadow would have started it where one ran."""
        doc = recorded_doc(self.namespace, self.name, list(self.members.values()), UNIX)
        if self.arrived is not None:
            doc["submitTime"] = min(int(doc["submitTime"]), self.arrived)
        ended = max((t for t, _ in self.ended.values()), default=None) if not self.live else None
        until = now if ended is None else ended
        doc["duration"] = max(1, until - self.starts[-1]) if self.starts else 1
        recorded = Recorded(
            tuple(self.starts),
            tuple(self.stops),
            ended,
            self.outcome(),
            tuple(sorted(set(self.nodes.values()))),
            self.scheduler,
            would_start=would_start,
        )
        doc["recorded"] = recorded.as_doc()
        return doc


class Recorder:
    """The reaction: reads the pods that changed since its last cycle, writes each workload
    to the store `linger_s` after it ended. `open_lines` gives those still open (for export)."""

    def __init__(
        self,
        store: HistoryStore,
        linger_s: int = LINGER_S,
        would_start: Callable[[str], int | None] | None = None,
    ) -> None:
        self.store = store
        self.linger_s = linger_s
        # in shadow mode: when the shadow would have started a workload (by its id)
        self.would_start = would_start
        self.generation = -1
        self.open: dict[tuple[str, str], Workload] = {}
        self.pod_group: dict[str, tuple[str, str]] = {}  # pod -> its workload's key
        # the scheduler's thread writes, the probe server's reads (`feed`)
        self.lock = threading.Lock()

    def react(self, s: Parts, d: Decided) -> None:
        with self.lock:
            self._react(s, int(s.clock().timestamp()))

    def _react(self, s: Parts, now: int) -> None:
        generation, changes, everything = s.pods.changes_since(self.generation)
        self.generation = generation
        if changes is None:  # a relist, or the first cycle: every pod, the rest are gone
            listed = {_key(p): p for p in everything}
            changes = {k: listed.get(k) for k in set(listed) | set(self.pod_group)}
        for key, pod in sorted(changes.items()):
            if pod is None:
                group = self.pod_group.pop(key, None)
                if group is not None and group in self.open:
                    self.open[group].gone(key, now)
            elif asks_gpus(pod):
                self._seen(key, pod, now)
        self._write_closed(now)

    def _seen(self, key: str, pod: Mapping[str, Any], now: int) -> None:
        group = group_key(pod)
        self.pod_group[key] = group
        w = self.open.get(group)
        if w is None:
            w = self.open[group] = Workload(*group)
        w.seen(key, pod, now)

    def _write_closed(self, now: int, linger_s: int | None = None) -> None:
        linger = self.linger_s if linger_s is None else linger_s
        due = [
            g
            for g, w in self.open.items()
            if w.closed_at is not None and now - w.closed_at >= linger
        ]
        if len(self.open) - len(due) > MAX_OPEN:
            due += sorted(set(self.open) - set(due))[: len(self.open) - len(due) - MAX_OPEN]
        written = []
        for g in due:
            w = self.open.pop(g)
            for pod in w.members:
                if self.pod_group.get(pod) == g:
                    del self.pod_group[pod]
            written.append(self._line(w, now))
        self.store.append_all(written, now)  # one write and one sync a cycle, not one a line

    def flush(self, now: int) -> None:
        """Write every workload that ended, lingering or not (the scheduler stops)."""
        with self.lock:
            self._write_closed(now, linger_s=0)

    def feed(self, since: int | None, now: int, namespaces: frozenset[str] | None = None) -> str:
        """The history as JSONL: what the store keeps, then the workloads still open; with
        `namespaces`, only theirs."""
        lines = [*self.store.lines(since), *self.open_lines(now)]
        if namespaces is not None:
            lines = [x for x in lines if x.get("namespace") in namespaces]
        return jsonl(lines)

    def open_lines(self, now: int) -> list[dict[str, Any]]:
        """The workloads not written yet (running, waiting, or lingering), as lines."""
        with self.lock:
            return [self._line(w, now) for _, w in sorted(self.open.items())]

    def _line(self, w: Workload, now: int) -> dict[str, Any]:
        would = None if self.would_start is None else self.would_start(f"{w.namespace}/{w.name}")
        return w.line(now, would)


def _key(pod: Mapping[str, Any]) -> str:
    meta = pod["metadata"]
    return f"{meta['namespace']}/{meta['name']}"
