"""Apply a cycle's decisions to a snapshot, as a driver that acts at once would.

The simulator uses this to advance; tests use it to build clusters with running work. Evicted
workloads return to pending (keeping their submit time) unless `requeue` is false; victims are
released before the admissions that waited for them take their slices.
"""

from __future__ import annotations

from types import MappingProxyType

from gpucarve.core.cluster import Allocation
from gpucarve.core.snapshot import Snapshot, Step
from gpucarve.core.workload import RunningWorkload, Workload
from gpucarve.engine.decisions import CycleResult


def apply(snapshot: Snapshot, result: CycleResult, requeue: bool = True) -> Snapshot:
    cluster = snapshot.cluster
    allocations = dict(cluster.allocations)
    running = {rw.workload.id: rw for rw in snapshot.running}
    pending = {w.id: w for w in snapshot.pending}
    evicted: list[Workload] = []
    freed: list[Allocation] = []
    taken: list[Allocation] = []
    stopped: list[RunningWorkload] = []
    started: list[RunningWorkload] = []
    for ev in result.evictions:
        rw = running.pop(ev.workload)
        for pod in rw.pods:
            for sid in pod.slice_ids:
                freed.append(allocations.pop(sid))
        evicted.append(rw.workload)
        stopped.append(rw)
    for adm in result.admissions:
        earlier = running.get(adm.workload)
        w = earlier.workload if earlier is not None else pending.pop(adm.workload)
        for pod in adm.pods:
            for i, sid in enumerate(pod.slice_ids):
                s = cluster.slices[sid]
                assert sid not in allocations, f"{sid} allocated twice"
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
    step = Step(tuple(freed), tuple(taken), tuple(stopped), tuple(started))
    return Snapshot(
        snapshot.policy,
        cluster.with_allocations(MappingProxyType(allocations)),
        tuple(running[k] for k in sorted(running)),
        tuple(pending[k] for k in sorted(pending)),
        snapshot.delta_with(step),
    )


def finish(snapshot: Snapshot, *workload_ids: str) -> Snapshot:
    """The snapshot after running workloads completed and released their slices."""
    done = set(workload_ids)
    allocations = dict(snapshot.cluster.allocations)
    running = []
    freed: list[Allocation] = []
    stopped: list[RunningWorkload] = []
    for rw in snapshot.running:
        if rw.workload.id not in done:
            running.append(rw)
            continue
        done.discard(rw.workload.id)
        stopped.append(rw)
        for pod in rw.pods:
            for sid in pod.slice_ids:
                freed.append(allocations.pop(sid))
    if done:
        raise KeyError(f"not running: {', '.join(sorted(done))}")
    cluster = snapshot.cluster.with_allocations(MappingProxyType(allocations))
    step = Step(freed=tuple(freed), stopped=tuple(stopped))
    return Snapshot(
        snapshot.policy, cluster, tuple(running), snapshot.pending, snapshot.delta_with(step)
    )
