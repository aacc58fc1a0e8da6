"""Fragmentation as the simulator samples it: the engine's measure (`engine.stranded`: free
slices no pending pod can use where they lie), kept up to date from the steps the driver
applies, in milli-GPU (each slice's charge, see docs/engine.md) per pool.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpucarve.core.amounts import Demand, FlavorName
from gpucarve.core.cluster import ClusterState
from gpucarve.core.policy import Policy
from gpucarve.core.requests import charge_milli, gpu_memory_of
from gpucarve.core.snapshot import Step
from gpucarve.core.workload import Workload
from gpucarve.engine import fewest_slices, group_of, smallest_needs, stranded_slices


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
        groups: dict[tuple[str, FlavorName, str], list[str]] = {}
        for sid in sorted(cluster.slices):
            s = cluster.slices[sid]
            groups.setdefault((pool_of[s.node], s.flavor, group_of(s)), []).append(sid)
        self.groups = [(pool, flavor) for (pool, flavor, _) in groups]
        self.group_of = {sid: i for i, ids in enumerate(groups.values()) for sid in ids}
        self.free = [len(ids) for ids in groups.values()]
        for sid in cluster.allocations:
            self.free[self.group_of[sid]] -= 1
        self._need: dict[str, Demand] = {}  # workload id -> flavor -> fewest slices

    def follow(self, step: Step) -> None:
        """Allocations freed and taken since the last step."""
        for a in step.freed:
            self.free[self.group_of[a.slice_id]] += 1
        for a in step.taken:
            self.free[self.group_of[a.slice_id]] -= 1

    def _needs(self, w: Workload) -> Demand:
        hit = self._need.get(w.id)
        if hit is None:
            hit = self._need[w.id] = fewest_slices(self.policy, w)
        return hit

    def sample(self, pending: Sequence[Workload]) -> dict[str, float]:
        """Stranded milli-GPU per pool (pools with none are left out)."""
        need = smallest_needs(self._needs(w) for w in pending)
        groups = zip(self.groups, (f for _, f in self.groups), self.free, strict=True)
        out: dict[str, float] = {}
        for (pool, flavor), n in stranded_slices(groups, need).items():
            out[pool] = out.get(pool, 0.0) + n * self.charge[flavor]
        return out
