"""GPUs held but idle, on a real cluster: what the DCGM exporter says each GPU does (through
the Prometheus that scrapes it, `--gpu-metrics-url`), turned into since when each running
workload of a queue with an idleness rule has been idle (the snapshot's `idle_since`), and
the Events that tell its pods before anything is done to them.

The readings come from a thread of their own (`ActivityFeed`): a slow or absent Prometheus
never holds a cycle up, and readings older than `stale_s` count as none. A workload counts as
idle only when every GPU it holds has a fresh reading below its queue's threshold: no reading,
a MIG instance (DCGM on Ampere does not attribute activity per instance) or a GPU shared with
busy work keeps it busy, so missing data never reclaims anything.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol

from gpucarve.core.held_idle import IdleClock, IdleStage
from gpucarve.core.policy import Policy, SliceKind
from gpucarve.core.snapshot import Snapshot
from gpucarve.core.vocabulary import IDLE_SINCE_ANNOTATION
from gpucarve.engine.decisions import HeldIdle
from gpucarve.kube.api.client import Client, rfc3339
from gpucarve.kube.scheduler.pod_marks import mark_pod

log = logging.getLogger(__name__)

IDLE_EVENT = "GPUIdle"  # the Event reason on an idle workload's pods (Warning)


class GpuUse(Protocol):
    """What one GPU does (the dashboard's DCGM reading has it): utilisation in percent."""

    @property
    def util_percent(self) -> float | None: ...


Readings = Mapping[tuple[str, int], GpuUse]  # (node, GPU index) -> what it does


class GpuReader(Protocol):
    def read(self) -> tuple[Readings, str | None]: ...


class ActivityFeed:
    """The latest readings of `reader`, refreshed every `period_s` in a daemon thread."""

    def __init__(
        self,
        reader: GpuReader,
        period_s: float = 15.0,
        stale_s: float = 120.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.reader, self.period_s, self.stale_s, self.clock = reader, period_s, stale_s, clock
        self._latest: tuple[float, Readings] | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: str | None = None

    def refresh(self) -> None:
        readings, error = self.reader.read()
        if error is not None:
            if error != self._error:
                log.warning("%s: no workload is judged idle meanwhile", error)
            self._error = error
            return
        self._error = None
        with self._lock:
            self._latest = (self.clock(), readings)

    def start(self) -> None:
        if self._thread is not None:
            return

        def run() -> None:
            while True:
                try:
                    self.refresh()
                except Exception:  # a reader's bug must not end the feed: logged, retried
                    log.exception("reading GPU activity failed")
                if self._stop.wait(self.period_s):
                    return

        self._thread = threading.Thread(target=run, name="gpu-activity", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def latest(self) -> Readings:
        """The readings, or none when the last good ones are older than `stale_s`."""
        with self._lock:
            got = self._latest
        if got is None or self.clock() - got[0] > self.stale_s:
            return {}
        return got[1]


def under_rules(policy: Policy, snapshot: Snapshot) -> list[str]:
    """The running workloads of queues with an idleness rule."""
    ruled = {q.name for q in policy.queues if q.idleness is not None}
    if not ruled:
        return []
    return [rw.workload.id for rw in snapshot.running if rw.workload.queue in ruled]


class IdleWatch:
    """Since when each running workload of a queue with an idleness rule has been idle."""

    def __init__(self, feed: ActivityFeed) -> None:
        self.feed = feed
        self.clock = IdleClock()

    def idle_since(
        self,
        policy: Policy,
        snapshot: Snapshot,
        now: int,
        marked: Mapping[str, int] | None = None,
    ) -> Mapping[str, int]:
        """`marked`: since when the pods' marks say each was idle (a previous scheduler's
        account, kept when the readings agree it still is)."""
        marked = marked or {}
        rules = {q.name: q.idleness for q in policy.queues if q.idleness is not None}
        if not rules:
            self.clock.keep_only(())
            return {}
        readings = self.feed.latest()
        slices = snapshot.cluster.slices
        watched = []
        for rw in snapshot.running:
            rule = rules.get(rw.workload.queue)
            if rule is None:
                continue
            wid = rw.workload.id
            watched.append(wid)
            gpus: set[tuple[str, int]] = set()
            mig = False
            for pod in rw.pods:
                for sid in pod.slice_ids:
                    sl = slices.get(sid)
                    if sl is not None:
                        gpus.add((sl.node, sl.gpu))
                        mig = mig or sl.kind is SliceKind.MIG
            activity = None if mig else activity_of(gpus, readings)
            self.clock.observe(wid, activity, rule.activity_below, now, marked.get(wid))
        self.clock.keep_only(watched)
        return self.clock.since()


def activity_of(gpus: set[tuple[str, int]], readings: Readings) -> float | None:
    """The most busy of `gpus` (percent), or None when one of them has no reading."""
    values = []
    for key in sorted(gpus):
        use = readings.get(key)
        if use is None or use.util_percent is None:
            return None
        values.append(use.util_percent)
    return max(values) if values else None


class Told:
    """The idle stage each workload's pods were last told of, so an Event goes once per
    stage (warned, then reclaimable), not every cycle."""

    def __init__(self) -> None:
        self.stage: dict[str, IdleStage] = {}

    def news(self, held: Sequence[HeldIdle]) -> list[HeldIdle]:
        now = {h.workload: h for h in held}
        for wid in [w for w in self.stage if w not in now]:
            del self.stage[wid]  # busy again, or gone: told afresh when it idles again
        out = []
        for h in held:
            if self.stage.get(h.workload) != h.stage:
                self.stage[h.workload] = h.stage
                out.append(h)
        return out


PodObject = Callable[[str], Mapping[str, Any] | None]  # pod key -> the object, if any


def marked_idle(
    running_pods: Mapping[str, Sequence[str]], pod_object: PodObject, epoch: datetime
) -> dict[str, int]:
    """Workload -> since when (seconds from `epoch`) its pods are marked idle: the latest of
    their marks; a workload with a pod unmarked (or marked unreadably) is not."""
    out: dict[str, int] = {}
    for wid, pods in running_pods.items():
        stamps = []
        for pod in pods:
            obj = pod_object(pod)
            raw = ((obj or {}).get("metadata", {}).get("annotations") or {}).get(
                IDLE_SINCE_ANNOTATION
            )
            try:
                stamps.append(datetime.fromisoformat(str(raw)))
            except ValueError:
                break
        else:
            if stamps:
                out[wid] = int((max(stamps) - epoch).total_seconds())
    return out


class IdleMarks:
    """The pods of work judged idle carry since when (`IDLE_SINCE_ANNOTATION`), and lose the
    mark once it is busy again: what explain reads, and a scheduler that takes over keeps."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def write(
        self,
        running_pods: Mapping[str, Sequence[str]],
        watched: Iterable[str],
        pod_object: PodObject,
        idle_since: Mapping[str, int],
        epoch: datetime,
    ) -> None:
        """`watched`: the running workloads of queues with an idleness rule."""
        for wid in watched:
            since = idle_since.get(wid)
            want = None if since is None else rfc3339(epoch + timedelta(seconds=since))
            for pod in running_pods.get(wid, ()):
                obj = pod_object(pod)
                if obj is None:
                    continue
                have = (obj["metadata"].get("annotations") or {}).get(IDLE_SINCE_ANNOTATION)
                if have != want:
                    mark_pod(self.client, pod, IDLE_SINCE_ANNOTATION, want, "idle mark")
