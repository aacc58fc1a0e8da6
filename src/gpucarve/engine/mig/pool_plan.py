"""MIG plans for a pool: node by node in name order, each node planned exactly
(`mig_node.plan_node`) against the demand the free instances of the rest of the pool, as
planned so far, do not meet; per-GPU plans (`mig_plan.plan_gpu`) where a node's state space is
too large. Nodes whose free instances already meet what the rest leaves are skipped, and the
walk stops once all demand is met or `max_changed_gpus` GPUs are changed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from itertools import groupby

from gpucarve.core.amounts import ProfileName
from gpucarve.engine.mig.gpu_plan import GpuPlan, PoolGpu, plan_gpu
from gpucarve.engine.mig.node_plan import plan_node


def node_of(gpu: str) -> str:
    return gpu.rpartition("/")[0]


def plan_pool(
    gpus: Sequence[PoolGpu],
    demand: Mapping[ProfileName, int],
    weight: Mapping[ProfileName, float] | None = None,
    max_changed_gpus: int | None = None,
    allowed: frozenset[ProfileName] | None = None,
) -> tuple[list[GpuPlan], dict[ProfileName, int]]:
    """Plans for the GPUs worth changing, and the demand left unserved (per profile)."""
    w = weight or {}
    want = Counter({p: n for p, n in demand.items() if n > 0})
    free_of = {g.gpu: Counter(i.profile for i in set(g.current) - set(g.in_use)) for g in gpus}
    supply: Counter[ProfileName] = Counter()
    for free in free_of.values():
        supply.update(free)
    plans: list[GpuPlan] = []
    ordered = sorted(gpus, key=lambda g: g.gpu)
    for _, group in groupby(ordered, key=lambda g: node_of(g.gpu)):
        node = list(group)
        budget = None if max_changed_gpus is None else max_changed_gpus - len(plans)
        if budget is not None and budget <= 0:
            break
        if not want - supply:
            break  # everything wanted is served already
        mine: Counter[ProfileName] = Counter()
        for g in node:
            mine.update(free_of[g.gpu])
        others = supply - mine
        local = want - others
        if not local - mine:
            continue  # its free instances already meet what the rest of the pool leaves
        node_plans = plan_node(node, local, w, allowed, budget)
        if node_plans is None:
            node_plans = per_gpu_plans(node, free_of, others, want, w, allowed, budget)
        new_free = dict(free_of)
        for plan in node_plans:
            g = next(x for x in node if x.gpu == plan.gpu)
            new_free[g.gpu] = Counter(i.profile for i in set(plan.layout) - set(g.in_use))
        plans.extend(node_plans)
        supply = others
        for g in node:
            supply = supply + new_free[g.gpu]
    left = want - supply
    return plans, {p: n for p, n in sorted(left.items()) if n > 0}


def per_gpu_plans(
    node: Sequence[PoolGpu],
    free_of: Mapping[str, Counter[ProfileName]],
    others: Counter[ProfileName],
    want: Counter[ProfileName],
    w: Mapping[ProfileName, float],
    allowed: frozenset[ProfileName] | None,
    budget: int | None,
) -> list[GpuPlan]:
    """Each GPU of the node planned exactly against what the rest leaves (greedy per node)."""
    supply = others.copy()
    for g in node:
        supply.update(free_of[g.gpu])
    out: list[GpuPlan] = []
    for g in node:
        if budget is not None and len(out) >= budget:
            break
        mine = free_of[g.gpu]
        rest = supply - mine
        local = want - rest
        if not local - mine:
            continue
        plan = plan_gpu(g.geom, g.gpu, g.current, g.in_use, local, w, allowed=allowed)
        if not plan.created and not plan.destroyed:
            continue
        out.append(plan)
        supply = rest + Counter(i.profile for i in set(plan.layout) - set(g.in_use))
    return out
