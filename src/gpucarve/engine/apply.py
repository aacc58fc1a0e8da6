"""Apply a cycle's decisions to a snapshot, as a driver that acts at once would.

The simulator uses this to advance; tests use it to build clusters with running work. Evicted
workloads return to pending (keeping their submit time) unless `requeue` is false; victims are
released before the admissions that waited for them take their slices.
"""

from __future__ import annotations

from types import MappingProxyType

from gpucarve.core.cluster import Allocation, ClusterState
from gpucarve.core.snapshot import Snapshot
from gpucarve.core.workload import RunningWorkload, Workload
from gpucarve.engine.decisions import CycleResult


def apply(snapshot: Snapshot, result: CycleResult, requeue: bool = True) -> Snapshot:
    cluster = snapshot.cluster
    allocations = dict(cluster.allocations)
    running = {rw.workload.id: rw for rw in snapshot.running}
    pending = {w.id: w for w in snapshot.pending}
    evicted: list[Workload] = []
    for ev in result.evictions:
        rw = running.pop(ev.workload)
        for pod in rw.pods:
            for sid in pod.slice_ids:
                del allocations[sid]
        evicted.append(rw.workload)
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
                allocations[sid] = Allocation(sid, pod.pod, s.compute_milli, mem)
        if earlier is not None:
            # More pods of a workload placed pod by pod (scheduling without gangs).
            running[w.id] = RunningWorkload(w, (*earlier.pods, *adm.pods), earlier.start_time)
        else:
            running[w.id] = RunningWorkload(w, adm.pods, result.now)
    if requeue:
        for w in evicted:
            pending[w.id] = w
    new_cluster = ClusterState(cluster.nodes, cluster.slices, MappingProxyType(allocations))
    return Snapshot(
        snapshot.policy,
        new_cluster,
        tuple(running[k] for k in sorted(running)),
        tuple(pending[k] for k in sorted(pending)),
    )


def finish(snapshot: Snapshot, *workload_ids: str) -> Snapshot:
    """The snapshot after running workloads completed and released their slices."""
    done = set(workload_ids)
    allocations = dict(snapshot.cluster.allocations)
    running = []
    for rw in snapshot.running:
        if rw.workload.id not in done:
            running.append(rw)
            continue
        done.discard(rw.workload.id)
        for pod in rw.pods:
            for sid in pod.slice_ids:
                del allocations[sid]
    if done:
        raise KeyError(f"not running: {', '.join(sorted(done))}")
    cluster = ClusterState(
        snapshot.cluster.nodes, snapshot.cluster.slices, MappingProxyType(allocations)
    )
    return Snapshot(snapshot.policy, cluster, tuple(running), snapshot.pending)
