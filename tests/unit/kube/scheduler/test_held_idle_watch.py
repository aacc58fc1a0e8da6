"""The scheduler's side of idleness rules: GPU readings (the DCGM exporter's, through
Prometheus) turned into since when each running workload has been idle; a missing, stale or
MIG reading never makes work idle; a busy reading starts the clock over; the idle stage is
told once per stage."""

from __future__ import annotations

from typing import Any

from gpucarve.core.held_idle import IdleStage
from gpucarve.dashboard.gpu_use import GpuUse
from gpucarve.engine.decisions import HeldIdle
from gpucarve.kube.scheduler.held_idle import ActivityFeed, IdleWatch, Told, activity_of
from tests.engine.builders import cycle, policy, pool, queue, snapshot, workload

RULE = {"activityBelow": 5, "warnAfterSeconds": 60, "reclaimAfterSeconds": 120}
NB = {"h100-full": {"nominal": 4}, "a100-mig-3g.40gb": {"nominal": 2}}
P = policy(
    pools=[
        pool("h", "H100-SXM5-80GB", 1, 8),
        pool("a", "A100-80GB", 1, 1, "mig", mig={"layout": {"3g.40gb": 2}}),
    ],
    queues=[queue("nb", NB, idleness=RULE), queue("busy", {"h100-full": {"nominal": 4}})],
)


class Reader:
    def __init__(self) -> None:
        self.util: dict[tuple[str, int], float] = {}
        self.error: str | None = None

    def read(self) -> tuple[dict[tuple[str, int], GpuUse], str | None]:
        if self.error:
            return {}, self.error
        return {k: GpuUse(v, None, None) for k, v in self.util.items()}, None


def _setup() -> tuple[Any, Reader, list[float], IdleWatch]:
    ws = [
        workload(P, "two", "nb", gpus=2),
        workload(P, "one", "nb", gpus=1),
        workload(P, "mig", "nb", mig="3g.40gb"),
        workload(P, "other", "busy", gpus=1),
    ]
    _, s = cycle(snapshot(P, ws))
    reader, now = Reader(), [0.0]
    feed = ActivityFeed(reader, stale_s=30, clock=lambda: now[0])
    return s, reader, now, IdleWatch(feed)


def _gpus(s: Any, wid: str) -> list[tuple[str, int]]:
    (rw,) = [r for r in s.running if r.workload.id == wid]
    cl = s.cluster.slices
    return sorted({(cl[sid].node, cl[sid].gpu) for p in rw.pods for sid in p.slice_ids})


def test_idle_counts_from_the_first_reading_below_and_a_busy_reading_starts_over() -> None:
    s, reader, _, watch = _setup()
    two, one = _gpus(s, "nb/two"), _gpus(s, "nb/one")
    reader.util = {two[0]: 1.0, two[1]: 4.0, one[0]: 50.0}
    reader.util |= dict.fromkeys(_gpus(s, "nb/mig") + _gpus(s, "busy/other"), 1.0)
    watch.feed.refresh()
    assert watch.idle_since(P, s, 100) == {"nb/two": 100}  # the MIG one: never judged
    assert watch.idle_since(P, s, 200) == {"nb/two": 100}
    reader.util[two[1]] = 7.0  # its busiest GPU crosses the threshold: busy again
    watch.feed.refresh()
    assert watch.idle_since(P, s, 300) == {}
    reader.util[two[1]] = 0.0
    watch.feed.refresh()
    assert watch.idle_since(P, s, 400) == {"nb/two": 400}


def test_missing_stale_or_failed_readings_make_nothing_idle() -> None:
    s, reader, now, watch = _setup()
    two = _gpus(s, "nb/two")
    reader.util = {two[0]: 1.0}  # one of its two GPUs unread
    watch.feed.refresh()
    assert watch.idle_since(P, s, 100) == {}
    reader.util = dict.fromkeys(two, 1.0)
    watch.feed.refresh()
    assert watch.idle_since(P, s, 110) == {"nb/two": 110}
    now[0] = 31.0  # the readings grew stale
    assert watch.idle_since(P, s, 120) == {}
    reader.error = "GPU metrics from http://prom unreadable: refused"
    watch.feed.refresh()  # a failed read keeps nothing as current
    assert watch.feed.latest() == {} and watch.idle_since(P, s, 130) == {}
    assert activity_of(set(), {}) is None


def test_each_stage_is_told_once() -> None:
    told = Told()
    warned = HeldIdle("nb/a", "nb", IdleStage.WARNED, 0, 120, "idle")
    reclaimable = HeldIdle("nb/a", "nb", IdleStage.RECLAIMABLE, 0, None, "idle")
    assert told.news([warned]) == [warned]
    assert told.news([warned]) == []
    assert told.news([reclaimable]) == [reclaimable]
    assert told.news([]) == []
    assert told.news([warned]) == [warned]  # idle again after it was busy: told afresh
