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
from gpucarve.core.snapshot import Step
from gpucarve.core.workload import Workload


class FragmentationProbe:
    """Keeps each group's free slices up to date from the steps the driver applies
    (`follow`), so a sample walks the groups, not every slice."""

    def __init__(self, policy: Policy, cluster: ClusterState) -> None:
        """`cluster`: the policy's cluster, with what is allocated in it now."""
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
        self.groups = [(pool, flavor) for (pool, flavor, _) in groups]
        self.group_of = {sid: i for i, ids in enumerate(groups.values()) for sid in ids}
        self.free = [len(ids) for ids in groups.values()]
        for sid in cluster.allocations:
            self.free[self.group_of[sid]] -= 1
        self._need: dict[str, dict[str, int]] = {}  # workload id -> flavor -> fewest slices

    def follow(self, step: Step) -> None:
        """Allocations freed and taken since the last step."""
        for a in step.freed:
            self.free[self.group_of[a.slice_id]] += 1
        for a in step.taken:
            self.free[self.group_of[a.slice_id]] -= 1

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

    def sample(self, pending: Sequence[Workload]) -> dict[str, float]:
        """Stranded milli-GPU per pool (pools with none are left out)."""
        need: dict[str, int] = {}
        for w in pending:
            for f, n in self._needs(w).items():
                need[f] = min(n, need.get(f, n))
        out: dict[str, float] = {}
        if not need:
            return out
        for (pool, flavor), free in zip(self.groups, self.free, strict=True):
            smallest = need.get(flavor)
            if smallest is not None and 0 < free < smallest:
                out[pool] = out.get(pool, 0.0) + free * self.charge[flavor]
        return out
