"""A deterministic discrete-event simulation around the engine.

Workloads arrive at their submit time, wait, are admitted and placed by the same `Engine` the
Kubernetes scheduler runs, make progress at a rate set by their GPUs (time-sliced and MPS GPUs
slow their jobs down, see `slowdown`), finish, or are evicted and requeued to start over. A
cycle runs at every instant where something happened, and every `tick` seconds while work is
pending (minimum runtimes and head waits expire with time alone).

Events at one instant are ordered by (time, kind, sequence number): completions before
MIG reconfigurations before arrivals before ticks, then in the order they were scheduled, so a
run is a pure function of its inputs.
"""

from __future__ import annotations

import bisect
import dataclasses
import gc
import heapq
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from gpucarve.core.cluster import build_cluster
from gpucarve.core.policy import Policy, SliceKind
from gpucarve.core.runtime import RuntimeBook
from gpucarve.core.snapshot import Snapshot, Step
from gpucarve.core.workload import PodAssignment, RunningWorkload, Workload
from gpucarve.engine import CycleResult, Engine, apply_in, derive, finish_in, usage_moved_on
from gpucarve.engine.decisions import Cause, Eviction
from gpucarve.engine.invariants import check_step
from gpucarve.sim.run import failures, mig_replay, slowdown
from gpucarve.sim.run.allocations import Allocations
from gpucarve.sim.run.fragmentation import FragmentationProbe
from gpucarve.sim.run.records import Interval, Kind, SimConfig, SimResult

DEFAULT_UTILISATION = 60.0  # percent of a GPU a job keeps busy alone, when the trace says nothing


EXACT_SLICES = 20_000


@dataclass(slots=True)
class _Job:
    workload: Workload
    remaining: float  # seconds of solo work left
    rate: float = 1.0
    since: int = 0  # when `remaining` was last brought up to date
    version: int = 0  # bumps invalidate scheduled completions
    start: int = 0


ProgressHook = Callable[[int, int], None]


def _complete(rw: RunningWorkload) -> bool:
    """Enough pods of every pod set are placed for the workload to run."""
    placed: dict[str, int] = {}
    for pod in rw.pods:
        placed[pod.pod_set] = placed.get(pod.pod_set, 0) + 1
    return all(placed.get(ps.name, 0) >= ps.min_count for ps in rw.workload.pod_sets)


@dataclass(slots=True)
class _Loop:
    """The event loop's own counters, between its steps."""

    arrivals_left: int
    by_id: dict[str, Workload]
    tick_gap: int
    now: int = 0
    cycles: int = 0
    tick_at: int | None = None
    next_sample: int = 0


class Simulator:
    def __init__(
        self,
        policy: Policy,
        workloads: Sequence[Workload],
        utilisation: Mapping[str, float] | None = None,
        config: SimConfig | None = None,
    ) -> None:
        config = config or SimConfig()
        missing = [w.id for w in workloads if w.duration is None]
        if missing:
            raise ValueError(f"workloads without a duration cannot be simulated: {missing[:5]}")
        self.policy = policy
        self.workloads = sorted(workloads, key=lambda w: (w.submit_time, w.id))
        self.utilisation = dict(utilisation or {})
        self.config = config
        self.engine = Engine()
        self.snapshot = Snapshot(policy, build_cluster(policy), runtimes=RuntimeBook())
        self.events: list[tuple[int, int, int, str]] = []
        self.seq = 0
        self.versions = 0
        self.jobs: dict[str, _Job] = {}
        self.holding: dict[str, int] = {}  # partly placed gangs (no-gang scheduling) -> since
        self.deferred = 0  # workloads the last cycle left untried: it placed its budget of pods
        self.gpu_jobs: dict[str, set[str]] = {}  # shared GPU id -> workloads on it
        self.result = SimResult(policy, 0)
        self.result.idle_after = self.idle_after = dict(config.idle_after)
        # only a policy with idleness rules is told which running work is idle
        self.judges_idle = bool(self.idle_after) and any(q.idleness for q in policy.queues)
        # The simulator's own state, from which each snapshot is derived (engine.apply's
        # `*_in` functions change them and say what changed): allocations, running workloads
        # by id, pending workloads by id.
        self.allocs = Allocations()
        self.live: dict[str, RunningWorkload] = {}
        self.queue: dict[str, Workload] = {}
        # The running workloads in id order, as the snapshot lists them, kept by bisection.
        self.run_ids: list[str] = []
        self.run_list: list[RunningWorkload] = []
        # The same for pending workloads: no sort of the whole queue per cycle.
        self.pend_ids: list[str] = []
        self.pend_list: list[Workload] = []
        self.reconfiguring: dict[str, list[str]] = {}  # MIG GPU -> new slices not ready yet
        # failed GPU -> (its entry in result.gpu_failures, the slices held until its repair)
        self.out_of_service: dict[str, tuple[int, list[str]]] = {}
        # Completed but not yet released from the snapshot: released together before the next
        # cycle or sample, the only readers of the snapshot (one O(running) pass, not one each).
        self.finished: list[str] = []
        self.probe = FragmentationProbe(policy, self.snapshot.cluster)
        # told each cycle's snapshot and result (the dashboard's export); never decide anything
        self.observers: list[Callable[[Snapshot, CycleResult], None]] = []
        span = (
            self.workloads[-1].submit_time - self.workloads[0].submit_time if self.workloads else 0
        )
        # Exact (a sample at every change) on clusters of up to EXACT_SLICES slices; larger
        # ones are sampled at most every `fragmentation_sample_s` and ~2,000 times in all.
        self.sample_s = (
            0
            if len(self.snapshot.cluster.slices) <= EXACT_SLICES
            else max(config.fragmentation_sample_s, span // 2000)
        )
        self.shared = {
            sid: s.node + "/gpu" + str(s.gpu)
            for sid, s in self.snapshot.cluster.slices.items()
            if s.kind in (SliceKind.TIME_SLICE, SliceKind.MPS)
        }

    # ------------------------------------------------------------------ events
    def push(self, t: int, kind: Kind, payload: str) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, int(kind), self.seq, payload))

    def run(self, progress: ProgressHook | None = None) -> SimResult:
        for f in self.config.gpu_failures:
            out_s = failures.time_out(f, self.config.gpu_health)
            if out_s is None:
                continue  # a class that takes nothing out of service
            self.push(f.at_s, Kind.GPU_FAILED, f"{f.gpu}#{f.fault_class}")
            self.push(f.at_s + out_s, Kind.GPU_REPAIRED, f.gpu)
        for w in self.workloads:
            self.push(w.submit_time, Kind.ARRIVAL, w.id)
            self.result.submitted[w.id] = w
        loop = _Loop(len(self.workloads), {w.id: w for w in self.workloads}, self.config.tick_s)
        with rarer_full_collections():
            return self._run(loop, progress)

    def _run(self, loop: _Loop, progress: ProgressHook | None) -> SimResult:
        while self.events and loop.cycles < self.config.max_cycles:
            now, past_horizon = self._instant()
            loop.now = now
            if past_horizon:
                break
            arrivals, moved = self._handle_events(loop)
            ended = bool(self.finished)
            self.flush_finished()
            if ended and self.policy.scheduling.usage_half_life_s is not None:
                # what ended stops counting as borrowed now, not at the next cycle
                self.snapshot = dataclasses.replace(
                    self.snapshot, usage=usage_moved_on(self.snapshot, now)
                )
            if arrivals:
                self._arrive(arrivals)
            stalled, mig_later = self._cycle(loop, progress)
            # a GPU being reconfigured will free its new instances, a failed one its slices
            mig_later = mig_later or bool(self.reconfiguring) or bool(self.out_of_service)
            if (moved or not stalled) and now >= loop.next_sample:
                # after the cycle: what is free and what still waits for it (it only changes
                # when something happened, so sampling then is exact)
                self.result.fragmentation.append((now, self.probe.sample(self.snapshot.pending)))
                loop.next_sample = now + self.sample_s
            if stalled and not self.jobs and not loop.arrivals_left and not mig_later:
                # Nothing runs, nothing arrives and nothing moved: part-placed gangs wait on
                # each other for good (a deadlock that gang scheduling prevents).
                break
            self._next_tick(loop, moved, stalled)
            if not self.snapshot.running and not loop.arrivals_left and not mig_later:
                # Nothing runs, nothing will arrive and no MIG layout can still change: what
                # still waits never fits.
                break
        return self._wrap_up(loop.now, loop.cycles)

    def _instant(self) -> tuple[int, bool]:
        """The next instant something happens, and whether it is past the horizon (then the
        run ends at the horizon)."""
        now = self.events[0][0]
        horizon = self.config.horizon_s
        if horizon is not None and now > horizon:
            return horizon, True
        if self.config.batch_s:
            # the scheduler runs a cycle per period: events inside it wait for its end
            now = -(-now // self.config.batch_s) * self.config.batch_s
            if horizon is not None:
                now = min(now, horizon)
        return now, False

    def _handle_events(self, loop: _Loop) -> tuple[list[Workload], bool]:
        """Every event up to `loop.now`: the arrivals, and whether anything but a tick
        happened since the last cycle."""
        arrivals: list[Workload] = []
        moved = False
        while self.events and self.events[0][0] <= loop.now:
            at, kind, _, payload = heapq.heappop(self.events)
            moved = moved or kind != Kind.TICK
            if kind == Kind.ARRIVAL:
                arrivals.append(loop.by_id[payload])
                loop.arrivals_left -= 1
            elif kind == Kind.RECONFIGURED:
                mig_replay.reconfigured(self, payload)
            elif kind == Kind.GPU_FAILED:
                gpu, _, fault_class = payload.rpartition("#")
                failures.fail(self, gpu, at, fault_class)
            elif kind == Kind.GPU_REPAIRED:
                failures.repair(self, payload, at)
            elif kind == Kind.COMPLETION:
                wid, _, version = payload.rpartition("#")
                job = self.jobs.get(wid)
                if job is not None and job.version == int(version):
                    self._complete(wid, at)
            elif loop.tick_at == at:
                loop.tick_at = None
        return arrivals, moved

    def _arrive(self, arrivals: list[Workload]) -> None:
        for w in arrivals:
            self.queue[w.id] = w
            self._pend_add(w)
        s = self.snapshot
        self.snapshot = Snapshot(
            s.policy, s.cluster, s.running, tuple(self.pend_list), s.delta_with(),
            s.mig_changed_at, runtimes=s.runtimes, usage=s.usage,
        )  # fmt: skip

    def _cycle(self, loop: _Loop, progress: ProgressHook | None) -> tuple[bool, bool]:
        """Engine cycles if anything waits: (nothing changed, a MIG layout may still). A cycle
        that placed its budget of pods (`scheduling.maxPodsPerCycle`) is followed at the same
        instant by the next, as the scheduler starts it at once."""
        stalled, mig_later = self._one_cycle(loop, progress)
        while self.deferred and loop.cycles < self.config.max_cycles:
            more_stalled, more_mig = self._one_cycle(loop, progress)
            stalled, mig_later = stalled and more_stalled, mig_later or more_mig
        return stalled, mig_later

    def _one_cycle(self, loop: _Loop, progress: ProgressHook | None) -> tuple[bool, bool]:
        self.deferred = 0
        if not (self.snapshot.pending or self.holding):
            idle = self.result.idle
            if idle and idle[-1][1] is not None:
                idle.append((loop.now, None))
            return False, False
        if self.judges_idle:
            self._tell_idle(loop.now)
        before = self.snapshot
        result = self.engine.run_cycle(before, loop.now)
        self.deferred = result.stats.deferred
        for observe in self.observers:
            observe(before, result)
        self.result.idle.append((loop.now, result.idle))
        loop.cycles += 1
        self.apply_result(result, loop.now)
        if self.config.check_invariants:
            check_step(before, result, self.snapshot)
        stalled = not (result.admissions or result.evictions or result.repartitions)
        mig_later = mig_replay.may_change(self, result, loop.now)
        if progress is not None:
            progress(loop.now, len(self.result.completed))
        return stalled, mig_later

    def _tell_idle(self, now: int) -> None:
        """The snapshot's idle_since from the trace's idle model: what the node agent's
        readings tell the scheduler."""
        since = {}
        for wid, job in self.jobs.items():
            after = self.idle_after.get(wid)
            if after is not None and job.start + after <= now:
                since[wid] = job.start + after
        self.snapshot = dataclasses.replace(self.snapshot, idle_since=since)

    def _next_tick(self, loop: _Loop, moved: bool, stalled: bool) -> None:
        """While cycles change nothing the retry interval doubles, up to idle_tick_max_s."""
        if moved or not stalled:
            loop.tick_gap = self.config.tick_s
        elif loop.tick_at is None:
            cap = max(self.config.tick_s, self.config.idle_tick_max_s)
            loop.tick_gap = min(2 * loop.tick_gap, cap)
        if (self.snapshot.pending or self.holding) and loop.tick_at is None:
            loop.tick_at = loop.now + loop.tick_gap
            self.push(loop.tick_at, Kind.TICK, "")

    def _wrap_up(self, now: int, cycles: int) -> SimResult:
        self.flush_finished()
        self.result.end = now
        self.result.cycles = cycles
        for wid, job in sorted(self.jobs.items()):
            self._close(wid, job, now, "cut")
        partial = {rw.workload.id: rw for rw in self.snapshot.running}
        for wid, since in sorted(self.holding.items()):
            w = self.result.submitted[wid]
            self.result.intervals.append(
                Interval(wid, w.queue, since, now, partial[wid].pods, "incomplete")
            )
            self.result.held_incomplete.add(wid)
        started = set(self.result.first_start)
        self.result.never_started = sorted(w.id for w in self.workloads if w.id not in started)
        return self.result

    # ------------------------------------------------------------------ progress
    def _util(self, wid: str) -> float:
        return self.utilisation.get(wid, DEFAULT_UTILISATION)

    def _rate(self, wid: str, pods: Sequence[PodAssignment]) -> float:
        rate = 1.0
        for pod in pods:
            for sid in pod.slice_ids[:1]:
                gpu = self.shared.get(sid)
                if gpu is not None:
                    utils = [self._util(other) for other in sorted(self.gpu_jobs.get(gpu, ()))]
                    rate = min(rate, slowdown.speed(utils))
        return rate

    def _gpus_of(self, pods: Sequence[PodAssignment]) -> set[str]:
        return {g for pod in pods for sid in pod.slice_ids if (g := self.shared.get(sid))}

    def _settle(self, wid: str, now: int) -> None:
        job = self.jobs[wid]
        job.remaining = max(0.0, job.remaining - (now - job.since) * job.rate)
        job.since = now

    def _reschedule(self, wids: set[str], now: int) -> None:
        running = self.live
        for wid in sorted(wids):
            job = self.jobs.get(wid)
            if job is None:
                continue
            self._settle(wid, now)
            job.rate = self._rate(wid, running[wid].pods)
            # Versions are unique across the run: a requeued workload's new job must not
            # match a completion scheduled for its evicted predecessor.
            self.versions += 1
            job.version = self.versions
            # ceil: a job completes at the first whole second its work is done
            left = job.remaining / job.rate
            done = now + int(left) + (0 if left == int(left) else 1)
            self.push(done, Kind.COMPLETION, f"{wid}#{job.version}")

    def _neighbours(self, gpus: set[str]) -> set[str]:
        return {w for g in gpus for w in self.gpu_jobs.get(g, ())}

    # ------------------------------------------------------------------ changes
    def _evict(self, ev: Eviction, now: int, shrunk: set[str]) -> set[str]:
        """An eviction's effect on the jobs and the record; the workloads that shared its
        GPUs (their speed changes). `shrunk` gathers elastic gangs that keep running."""
        rw = self.live[ev.workload]
        going = set(ev.pods)
        kept = [p for p in rw.pods if going and p.pod not in going]
        gpus = self._gpus_of(rw.pods) - self._gpus_of(kept)
        for g in gpus:
            self.gpu_jobs[g].discard(ev.workload)
        touched = self._neighbours(gpus)
        failed = ev.cause is Cause.GPU_FAILURE  # recorded with the failure, no preemption
        if not failed:
            self.result.evictions.append((now, ev.workload, ev.by, str(ev.cause)))
        if going:
            shrunk.add(ev.workload)  # an elastic gang: it keeps running on the rest
            return touched
        shrunk.discard(ev.workload)
        job = self.jobs.pop(ev.workload, None)
        if job is not None and ev.cause is Cause.IDLE:
            # its work was done (it was idle to its end): it ends here, GPUs back early
            left = max(0.0, job.remaining - (now - job.since) * job.rate) / job.rate
            self.result.idle_reclaimed[ev.workload] = (left, rw.pods)
            self._close(ev.workload, job, now, "reclaimed-idle")
            self.result.completed[ev.workload] = now
        elif job is not None:
            self._close(ev.workload, job, now, "failed" if failed else "evicted")
        elif (since := self.holding.pop(ev.workload, None)) is not None:
            # a part-placed gang (no gang scheduling) on the failed GPU
            iv = Interval(ev.workload, rw.workload.queue, since, now, rw.pods, "incomplete")
            self.result.intervals.append(iv)
            self.result.held_incomplete.add(ev.workload)
        return touched

    def apply_result(self, result: CycleResult, now: int) -> None:
        running = self.live
        touched: set[str] = set()
        shrunk: set[str] = set()
        for ev in result.evictions:
            touched |= self._evict(ev, now, shrunk)
        # part-placed gangs' pods as they were, for the interval they held GPUs idle
        held_pods = {wid: running[wid].pods for wid in self.holding}
        slices = self.snapshot.cluster.slices
        leaving = [adm.workload for adm in result.admissions if adm.workload in self.queue]
        step = apply_in(slices, self.allocs, self.live, self.queue, result)
        self._follow(step)
        for wid in leaving:
            i = bisect.bisect_left(self.pend_ids, wid)
            del self.pend_ids[i]
            del self.pend_list[i]
        for wid in dict.fromkeys(e.workload for e in result.evictions if not e.pods):
            if wid in self.result.idle_reclaimed:
                self.queue.pop(wid, None)  # reclaimed idle: it ended, nothing to run again
            elif wid not in shrunk and wid in self.queue:
                self._pend_add(self.queue[wid])
        self.snapshot = derive(
            self.snapshot, self.allocs.frozen(), tuple(self.run_list), tuple(self.pend_list), step
        )
        if result.usage is not None:
            self.snapshot = dataclasses.replace(self.snapshot, usage=result.usage)
        self.probe.follow(step)
        if self.out_of_service and step.freed:
            failures.hold_freed(self, step)
        after = self.live
        for adm in result.admissions:
            wid = adm.workload
            if wid in self.jobs:
                continue  # more pods of a running workload (placed one by one); it already runs
            w = self.result.submitted[wid]
            rw = after[wid]
            held = self.holding.pop(wid, None)
            if held is not None:
                # close the stretch in which part of the gang held GPUs without running
                self.result.intervals.append(
                    Interval(wid, w.queue, held, now, held_pods[wid], "incomplete")
                )
                self.result.held_incomplete.add(wid)
            if not _complete(rw):
                self.holding[wid] = now
                continue
            assert w.duration is not None
            self.jobs[wid] = _Job(w, float(w.duration), since=now, start=now)
            self.result.first_start.setdefault(wid, now)
            gpus = self._gpus_of(rw.pods)
            for g in gpus:
                self.gpu_jobs.setdefault(g, set()).add(wid)
            touched |= self._neighbours(gpus) | {wid}
        self._reschedule(touched, now)
        if result.repartitions:
            mig_replay.repartition(self, result, now)

    def _complete(self, wid: str, now: int) -> None:
        rw = self.live[wid]
        gpus = self._gpus_of(rw.pods)
        for g in gpus:
            self.gpu_jobs[g].discard(wid)
        job = self.jobs.pop(wid)
        # what the reservations learn from: how long this kind of work ran, seen as it ended
        self.snapshot.runtimes.record(job.workload, now - job.start)
        self._close(wid, job, now, "completed")
        self.result.completed[wid] = now
        self.finished.append(wid)
        self._reschedule(self._neighbours(gpus), now)

    def _follow(self, step: Step) -> None:
        for rw in step.stopped:
            i = bisect.bisect_left(self.run_ids, rw.workload.id)
            del self.run_ids[i]
            del self.run_list[i]
        for rw in step.started:
            i = bisect.bisect_left(self.run_ids, rw.workload.id)
            self.run_ids.insert(i, rw.workload.id)
            self.run_list.insert(i, rw)

    def _pend_add(self, w: Workload) -> None:
        i = bisect.bisect_left(self.pend_ids, w.id)
        self.pend_ids.insert(i, w.id)
        self.pend_list.insert(i, w)

    def change_allocations(self, step: Step) -> None:
        """Allocations made or released outside a cycle (a GPU failing or repaired, a MIG
        change done): the snapshot and the fragmentation probe follow `step`."""
        s = self.snapshot
        self.snapshot = derive(s, self.allocs.frozen(), s.running, s.pending, step)
        self.probe.follow(step)

    def flush_finished(self) -> None:
        if self.finished:
            step = finish_in(self.allocs, self.live, tuple(self.finished))
            self._follow(step)
            s = self.snapshot
            self.snapshot = derive(s, self.allocs.frozen(), tuple(self.run_list), s.pending, step)
            self.probe.follow(step)
            self.finished = []
            if self.out_of_service and step.freed:
                failures.hold_freed(self, step)

    def _close(self, wid: str, job: _Job, now: int, outcome: str) -> None:
        rw = self.live[wid]
        self.result.intervals.append(
            Interval(wid, job.workload.queue, job.start, now, rw.pods, outcome)
        )


FULL_COLLECTION_EVERY = 100  # collections of generation 1 per full collection, at least


@contextmanager
def rarer_full_collections() -> Iterator[None]:
    """Full collections of the cyclic garbage collector at most once per
    `FULL_COLLECTION_EVERY` collections of the generation below while the run goes on (then
    put back as they were), as the scheduler sets them: a run's long-lived state (the trace,
    the indexed cluster, the results) only grows, and each full collection walks all of it
    (at 5,760 nodes, ten of them took a tenth of the run). Cyclic garbage waits longer for its
    collection; the engine's cycles make little, since the collector is held off through them
    and reference counting frees the rest."""
    before = gc.get_threshold()
    gc.set_threshold(before[0], before[1], max(before[2], FULL_COLLECTION_EVERY))
    try:
        yield
    finally:
        gc.set_threshold(*before)
