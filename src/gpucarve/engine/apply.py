"""Apply a cycle's decisions to a snapshot, as a driver that acts at once would.

The simulator uses this to advance; tests use it to build clusters with running work. Evicted
workloads return to pending (keeping their submit time) unless `requeue` is false; an elastic
gang that gave back surplus pods keeps running with the rest (and grows again later); victims
are released before the admissions that waited for them take their slices.

`apply_in` and `finish_in` do the same on a driver's own mutable maps and return the `Step`
(what changed), for a driver that keeps its state between cycles and derives each snapshot
from it; `apply` and `finish` wrap them for immutable snapshots.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, MutableMapping
from types import MappingProxyType

from gpucarve.core.cluster import Allocation, Slice
from gpucarve.core.snapshot import Snapshot, Step
from gpucarve.core.usage import UsageBook
from gpucarve.core.workload import RunningWorkload, Workload
from gpucarve.engine.decisions import CycleResult
from gpucarve.engine.invariants import InvariantViolation
from gpucarve.engine.quota import Quotas
from gpucarve.engine.usage import usage_after


def apply_in(
    slices: Mapping[str, Slice],
    allocations: MutableMapping[str, Allocation],
    running: dict[str, RunningWorkload],
    pending: dict[str, Workload],
    result: CycleResult,
    requeue: bool = True,
) -> Step:
    freed: list[Allocation] = []
    taken: list[Allocation] = []
    stopped: list[RunningWorkload] = []
    started: list[RunningWorkload] = []
    evicted: list[Workload] = []
    shrunk: dict[str, RunningWorkload] = {}
    for ev in result.evictions:
        rw = running.pop(ev.workload)
        going = set(ev.pods)
        for pod in rw.pods:
            if not going or pod.pod in going:
                for sid in pod.slice_ids:
                    freed.append(allocations.pop(sid))
        if ev.workload not in shrunk:
            stopped.append(rw)  # as it ran before the cycle (a later eviction may take the rest)
        if going:
            # an elastic gang gives back its surplus pods and keeps running with the rest
            kept = tuple(p for p in rw.pods if p.pod not in going)
            running[ev.workload] = shrunk[ev.workload] = RunningWorkload(
                rw.workload, kept, rw.start_time
            )
        else:
            shrunk.pop(ev.workload, None)
            evicted.append(rw.workload)
    started += shrunk.values()
    for adm in result.admissions:
        earlier = running.get(adm.workload)
        w = earlier.workload if earlier is not None else pending.pop(adm.workload)
        for pod in adm.pods:
            for i, sid in enumerate(pod.slice_ids):
                s = slices[sid]
                if sid in allocations:  # a real check: `assert` is gone under python -O
                    raise InvariantViolation(
                        f"{sid} allocated twice: to {allocations[sid].owner} and to {pod.pod}"
                    )
                mem = s.memory_mib
                if pod.shared_memory_mib:
                    # A pod's replicas share one GPU: its declared memory is booked once, on
                    # the first replica, so the GPU's total stays exact.
                    mem = pod.shared_memory_mib if i == 0 else 0
                allocations[sid] = a = Allocation(sid, pod.pod, s.compute_milli, mem)
                taken.append(a)
        if earlier is not None:
            # More pods of a workload placed pod by pod (scheduling without gangs).
            running[w.id] = RunningWorkload(w, (*earlier.pods, *adm.pods), earlier.start_time)
            stopped.append(earlier)
        else:
            running[w.id] = RunningWorkload(w, adm.pods, result.now)
        started.append(running[w.id])
    if requeue:
        for w in evicted:
            pending[w.id] = w
    return Step(tuple(freed), tuple(taken), tuple(stopped), tuple(started), of=result)


def finish_in(
    allocations: MutableMapping[str, Allocation],
    running: dict[str, RunningWorkload],
    workload_ids: tuple[str, ...],
) -> Step:
    missing = sorted(w for w in set(workload_ids) if w not in running)
    if missing:
        raise KeyError(f"not running: {', '.join(missing)}")
    freed: list[Allocation] = []
    stopped: list[RunningWorkload] = []
    for wid in dict.fromkeys(workload_ids):
        rw = running.pop(wid)
        stopped.append(rw)
        for pod in rw.pods:
            for sid in pod.slice_ids:
                freed.append(allocations.pop(sid))
    return Step(freed=tuple(freed), stopped=tuple(stopped))


def derive(
    snapshot: Snapshot,
    allocations: Mapping[str, Allocation],
    running: Mapping[str, RunningWorkload] | tuple[RunningWorkload, ...],
    pending: Mapping[str, Workload] | tuple[Workload, ...],
    step: Step,
) -> Snapshot:
    """The snapshot after `step`, from the driver's maps (copied: the snapshot stays fixed).
    Maps are sorted by id; tuples (already in id order) are kept as they are. Allocations that
    are not a dict are taken as they are: the driver hands over a map that never changes
    (the simulator's `sim.allocations`)."""
    if not isinstance(pending, tuple):
        pending = tuple(w for _, w in sorted(pending.items()))
    if not isinstance(running, tuple):
        running = tuple(rw for _, rw in sorted(running.items()))
    return Snapshot(
        snapshot.policy,
        snapshot.cluster.with_allocations(
            MappingProxyType(dict(allocations)) if isinstance(allocations, dict) else allocations
        ),
        running,
        pending,
        snapshot.delta_with(step),
        snapshot.mig_changed_at,
        runtimes=snapshot.runtimes,
        usage=snapshot.usage,
        idle_since=snapshot.idle_since,
    )


def apply(snapshot: Snapshot, result: CycleResult, requeue: bool = True) -> Snapshot:
    allocations = dict(snapshot.cluster.allocations)
    running = {rw.workload.id: rw for rw in snapshot.running}
    pending = {w.id: w for w in snapshot.pending}
    step = apply_in(snapshot.cluster.slices, allocations, running, pending, result, requeue)
    after = derive(snapshot, allocations, running, pending, step)
    if result.usage is not None:
        after = dataclasses.replace(after, usage=result.usage)
    return after


def finish(snapshot: Snapshot, *workload_ids: str) -> Snapshot:
    """The snapshot after running workloads completed and released their slices."""
    allocations = dict(snapshot.cluster.allocations)
    running = {rw.workload.id: rw for rw in snapshot.running}
    step = finish_in(allocations, running, workload_ids)
    return derive(snapshot, allocations, running, snapshot.pending, step)


def usage_moved_on(snapshot: Snapshot, now: int) -> UsageBook:
    """The snapshot's usage book moved on to `now`, holding what its running work borrows
    from then on: the driver's step when work ends between cycles, so that the time after it
    is not counted as borrowed (scheduling.usageHalfLifeSeconds; the book as it is without)."""
    half_life = snapshot.policy.scheduling.usage_half_life_s
    if half_life is None:
        return snapshot.usage
    held = usage_after(snapshot.running, CycleResult(now))
    shares = Quotas(snapshot.policy, dict(held)).borrowed_shares()
    return snapshot.usage.moved_on(now, half_life, shares)
