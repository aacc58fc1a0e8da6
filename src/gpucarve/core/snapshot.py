"""What one scheduling cycle sees: the policy, the cluster, and the workloads in it.

The simulator builds it from its event state, the Kubernetes scheduler from its informer
cache. `ClusterState.allocations` and `running` must agree (every running pod's slices are
allocated to that pod); `Snapshot.check()` says where they do not.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpucarve.core.cluster import ClusterState
from gpucarve.core.policy import Policy
from gpucarve.core.workload import RunningWorkload, Workload


@dataclass(frozen=True)
class Snapshot:
    policy: Policy
    cluster: ClusterState
    running: tuple[RunningWorkload, ...] = ()
    pending: tuple[Workload, ...] = ()

    def check(self) -> list[str]:
        out = self.cluster.invariant_violations()
        owners: dict[str, str] = {}
        for rw in self.running:
            for pod in rw.pods:
                for sid in pod.slice_ids:
                    alloc = self.cluster.allocations.get(sid)
                    if alloc is None or alloc.owner != pod.pod:
                        out.append(f"{pod.pod} runs on {sid}, which is not allocated to it")
                    if sid in owners:
                        out.append(f"{sid} held by {owners[sid]} and {pod.pod}")
                    owners[sid] = pod.pod
        ids = [w.id for w in self.pending] + [rw.workload.id for rw in self.running]
        if len(ids) != len(set(ids)):
            out.append("a workload is listed twice (pending or running)")
        return out
