"""Fragmentation: free GPU capacity that no pending pod can use where it lies.

Free slices are grouped where one pod must find its slices: a node for whole GPUs and MIG
instances, one GPU for time-slice and MPS replicas. A group is stranded when work of its flavor
is pending and every pending pod of that flavor needs more slices than the group has free. Free
capacity with no pending demand is idle, not fragmented. CPU and memory are not considered
(a node's GPU freed by a CPU shortage is not counted). Amounts are in milli-GPU (each slice's
charge, see docs/engine.md), per pool.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpucarve.core.cluster import ClusterState
from gpucarve.core.policy import Policy, SliceKind
from gpucarve.core.requests import candidate_flavors, charge_milli, gpu_memory_of, slices_per_pod
from gpucarve.core.workload import Workload


class FragmentationProbe:
    def __init__(self, policy: Policy, cluster: ClusterState) -> None:
        """`cluster`: the policy's cluster (its nodes and slices; allocations are ignored)."""
        self.policy = policy
        pool_of = {n.name: n.pool for n in cluster.nodes}
        self.charge = {
            f: charge_milli(fl, gpu_memory_of(policy, fl)) for f, fl in policy.flavors.items()
        }
        groups: dict[tuple[str, str, str], list[str]] = {}
        for sid in sorted(cluster.slices):
            s = cluster.slices[sid]
            shared = s.kind in (SliceKind.TIME_SLICE, SliceKind.MPS)
            where = f"{s.node}/{s.gpu}" if shared else s.node
            groups.setdefault((pool_of[s.node], s.flavor, where), []).append(sid)
        self.groups = [(pool, flavor, tuple(ids)) for (pool, flavor, _), ids in groups.items()]
        self._need: dict[str, dict[str, int]] = {}  # workload id -> flavor -> fewest slices

    def _needs(self, w: Workload) -> dict[str, int]:
        hit = self._need.get(w.id)
        if hit is None:
            hit = {}
            for ps in w.pod_sets:
                for f in candidate_flavors(self.policy, ps.gpu):
                    n = slices_per_pod(ps.gpu, f, gpu_memory_of(self.policy, f))
                    hit[f.name] = min(n, hit.get(f.name, n))
            self._need[w.id] = hit
        return hit

    def sample(self, cluster: ClusterState, pending: Sequence[Workload]) -> dict[str, float]:
        """Stranded milli-GPU per pool (pools with none are left out)."""
        need: dict[str, int] = {}
        for w in pending:
            for f, n in self._needs(w).items():
                need[f] = min(n, need.get(f, n))
        out: dict[str, float] = {}
        if not need:
            return out
        allocated = cluster.allocations
        for pool, flavor, ids in self.groups:
            smallest = need.get(flavor)
            if smallest is None:
                continue
            free = sum(1 for sid in ids if sid not in allocated)
            if 0 < free < smallest:
                out[pool] = out.get(pool, 0.0) + free * self.charge[flavor]
        return out
