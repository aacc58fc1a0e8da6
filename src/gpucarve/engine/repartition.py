"""Dynamic MIG inside the cycle: after the queue has been served from the layouts as they are,
repartition GPUs of dynamic pools for the MIG work that quota admits but no free instance holds.

Demand is the pods of pending workloads refused at placement whose pod sets could use a MIG
flavor of a dynamic pool, counted per profile (each profile weighted by the highest priority
asking for it). Eligible GPUs are those of the dynamic pools not changed within the pool's
minimum interval; the instances in use (including this cycle's admissions) are kept where they
are. `mig_plan.plan_pool` picks the GPUs and layouts (exact per GPU, greedy over the pool,
fewest changes first), at most `maxGpusPerCycle` GPUs per pool. No preemption is involved: a
repartition only reshapes free instances, so it is always the less disruptive action.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from gpucarve.core.cluster import RECONFIGURING
from gpucarve.core.policy import SliceKind
from gpucarve.engine.decisions import Repartition, Stage
from gpucarve.engine.mig_plan import PoolGpu
from gpucarve.engine.mig_pool import plan_pool

if TYPE_CHECKING:
    from gpucarve.engine.cycle import Cycle


def plan(c: Cycle) -> tuple[tuple[Repartition, ...], tuple[tuple[str, int], ...]]:
    policy = c.policy
    dynamic = {p.name: p for p in policy.pools if p.mig_dynamic is not None}
    if not dynamic:
        return (), ()
    by_id = {w.id: w for w in c.snapshot.pending}
    # profile -> pool names whose flavors serve it, per flavor name
    flavor_pool = {
        f.name: pool.name for pool in dynamic.values() for f in pool.flavors() if f.profile
    }
    demand: dict[str, Counter[str]] = {name: Counter() for name in dynamic}
    top: dict[str, Counter[str]] = {name: Counter() for name in dynamic}
    for p in c.pending:
        if p.reason.stage is not Stage.PLACEMENT:
            continue
        w = by_id.get(p.workload)
        if w is None:
            continue
        for ps in w.pod_sets:
            for f in c.flavors_for_set(w, ps):
                pool_name = flavor_pool.get(f.name)
                if pool_name is None or f.kind is not SliceKind.MIG or f.profile is None:
                    continue
                demand[pool_name][f.profile] += ps.min_count
                top[pool_name][f.profile] = max(top[pool_name][f.profile], w.priority + 1)
                break
    allocations = c.snapshot.cluster.allocations
    used = set(allocations)
    # GPUs being reconfigured are left alone, and what they are creating counts as served
    coming: dict[str, Counter[str]] = {}
    for sid, alloc in allocations.items():
        if alloc.owner.startswith(RECONFIGURING):
            sl = c.snapshot.cluster.slices[sid]
            gid = f"{sl.node}/gpu{sl.gpu}"
            coming.setdefault(gid, Counter())[sl.profile or ""] += 1
    for a in c.admissions:
        for pod in a.pods:
            used.update(pod.slice_ids)
    cluster = c.snapshot.cluster
    out: list[Repartition] = []
    unserved: Counter[str] = Counter()
    for name, pool in sorted(dynamic.items()):
        want = demand[name]
        for node in cluster.nodes:
            if node.pool == name:
                for g in node.gpus:
                    want.subtract(coming.get(g.id, Counter()))
        want = +want
        if not want:
            continue
        assert pool.mig_dynamic is not None and pool.model.mig is not None
        geom = pool.model.mig
        allowed = frozenset(f.profile for f in pool.flavors() if f.profile)
        gpus = []
        for node in cluster.nodes:
            if node.pool != name:
                continue
            for g in node.gpus:
                if g.id in coming:
                    continue
                changed = c.snapshot.mig_changed_at.get(g.id)
                if changed is not None and c.now - changed < pool.mig_dynamic.min_interval_s:
                    continue
                in_use = tuple(i for i in g.mig_layout if f"{g.id}/{i.profile}@{i.start}" in used)
                gpus.append(PoolGpu(g.id, geom, g.mig_layout, in_use))
        # Higher priorities weigh more: ranks, so that one priority class never needs a
        # specific numeric scale to win.
        ranks = {v: i + 1 for i, v in enumerate(sorted(set(top[name].values())))}
        weight = {p: float(ranks[v]) for p, v in top[name].items()}
        plans, left = plan_pool(
            gpus, dict(want), weight, pool.mig_dynamic.max_gpus_per_cycle, allowed
        )
        for gp in plans:
            node_name, _, index = gp.gpu.rpartition("/gpu")
            out.append(
                Repartition(node_name, int(index), gp.layout, gp.created, gp.destroyed, gp.reason)
            )
        unserved.update(left)
    return tuple(out), tuple(sorted(unserved.items()))
