"""What the dashboard shows over time, folded in one cycle at a time and bounded: queue usage
per cycle, GPU-seconds free while work waited by pool and cause (each cycle's idle held until
the next, as the scheduler's `gpucarve_idle_gpu_seconds_total` counts), and the latest
evictions (with the work they destroyed) and repartitions."""

from __future__ import annotations

from collections import defaultdict, deque
from typing import Any

from gpucarve.dashboard.model import Frame, idle_now, queues, share

POINTS = 720  # queue usage points kept
EVERY_S = 60  # at most one point a minute of cycle time: 720 points are the last 12 hours
EVENTS = 500  # evictions and repartitions kept


class History:
    def __init__(self, points: int = POINTS, events: int = EVENTS, every_s: int = EVERY_S) -> None:
        self.points: deque[dict[str, Any]] = deque(maxlen=points)
        self.every_s = every_s
        self.events: deque[dict[str, Any]] = deque(maxlen=events)
        self.idle_seconds: defaultdict[str, defaultdict[str, float]] = defaultdict(
            lambda: defaultdict(float)
        )
        self._last: tuple[int, dict[str, dict[str, float]]] | None = None

    def add(self, frame: Frame, at: str) -> None:
        now = frame.result.now
        if self._last is not None:
            then, idle = self._last
            held = max(0, now - then)
            for pool, causes in idle.items():
                for cause, gpus in causes.items():
                    self.idle_seconds[pool][cause] += gpus * held
        self._last = (now, idle_now(frame))
        if not self.points or now - self.points[-1]["t"] >= self.every_s:
            used = {
                q["name"]: {r["key"]: r["used"] for r in q["quota"]}
                for q in queues(frame)["queues"]
            }
            self.points.append({"t": now, "at": at, "used": used})
        self._events(frame, at)

    def _events(self, frame: Frame, at: str) -> None:
        # looked up only in a cycle that evicted: most do not, and the running workloads are
        # the whole cluster's (a pass over them was a twentieth of a scheduler's cycle)
        evicted = {e.workload for e in frame.result.evictions}
        running = (
            {rw.workload.id: rw for rw in frame.snapshot.running if rw.workload.id in evicted}
            if evicted
            else {}
        )
        cluster = frame.snapshot.cluster
        for e in frame.result.evictions:
            rw = running.get(e.workload)
            lost = 0.0
            if rw is not None:
                pods = [p for p in rw.pods if not e.pods or p.pod in e.pods]
                gpus = sum(
                    share(cluster.slices[s], frame.policy) for p in pods for s in p.slice_ids
                )
                lost = gpus * max(0, frame.result.now - rw.start_time) / 3600
            self.events.append(
                {
                    "at": at,
                    "kind": e.cause.value,
                    "workload": e.workload,
                    "queue": e.queue,
                    "by": e.by,
                    "message": e.message,
                    "gpuHoursLost": round(lost, 3),
                }
            )
        for r in frame.result.repartitions:
            self.events.append(
                {
                    "at": at,
                    "kind": "repartition",
                    "gpu": f"{r.node}/gpu{r.gpu}",
                    "layout": [i.profile for i in r.layout],
                    "message": r.reason,
                }
            )

    def idle_gpu_hours(self) -> dict[str, dict[str, float]]:
        return {
            pool: {c: round(s / 3600, 4) for c, s in sorted(causes.items())}
            for pool, causes in sorted(self.idle_seconds.items())
        }
