"""Node plans are exact: against brute force over every valid set of instances on each GPU
of small nodes, with and without a limit on the GPUs changed, and where planning GPU by GPU
falls short."""

from __future__ import annotations

import itertools
import random
from collections import Counter

import pytest

from gpucarve.config.catalog_file import packaged_catalog
from gpucarve.core.catalog import MigGeometry
from gpucarve.core.mig import Instance, maximal_layouts, place, placement_problems
from gpucarve.engine.mig.gpu_plan import GpuPlan, PoolGpu
from gpucarve.engine.mig.node_plan import node_optimum, plan_node
from gpucarve.engine.mig.pool_plan import per_gpu_plans, plan_pool


def geometry() -> MigGeometry:
    geom = packaged_catalog().lookup("A100-80GB").mig
    assert geom is not None
    return geom


def free_sets(geom: MigGeometry, in_use: tuple[Instance, ...]) -> set[frozenset[Instance]]:
    """Every set of free instances a GPU can hold next to its in-use ones."""
    cands = [Instance(s, p.name) for p in geom.profiles if "+me" not in p.name for s in p.starts]
    out: set[frozenset[Instance]] = set()

    def dfs(i: int, chosen: list[Instance]) -> None:
        if i == len(cands):
            out.add(frozenset(chosen))
            return
        dfs(i + 1, chosen)
        if not placement_problems(geom, [*in_use, *chosen, cands[i]]):
            dfs(i + 1, [*chosen, cands[i]])

    dfs(0, [])
    return out


def brute_force(
    gpus: list[PoolGpu],
    demand: dict[str, int],
    weight: dict[str, float],
    max_changed: int | None = None,
) -> float:
    geom = geometry()
    per_gpu = []
    for g in gpus:
        now = frozenset(set(g.current) - set(g.in_use))
        per_gpu.append(
            [(Counter(i.profile for i in s), s != now) for s in free_sets(geom, g.in_use)]
        )
    best = 0.0
    for combo in itertools.product(*per_gpu):
        if max_changed is not None and sum(changed for _, changed in combo) > max_changed:
            continue
        total: Counter[str] = Counter()
        for free, _ in combo:
            total.update(free)
        best = max(
            best, sum(weight.get(p, 1.0) * min(n, demand.get(p, 0)) for p, n in total.items())
        )
    return best


def served(
    gpus: list[PoolGpu], demand: dict[str, int], weight: dict[str, float], limit: int | None
) -> float:
    plans, left = plan_pool(gpus, demand, weight, max_changed_gpus=limit)
    if limit is not None:
        assert len(plans) <= limit
    for p in plans:
        g = next(x for x in gpus if x.gpu == p.gpu)
        assert set(g.in_use) <= set(p.layout), "an instance in use was moved"
        assert not placement_problems(geometry(), list(p.layout))
    return sum(weight.get(p, 1.0) * (n - left.get(p, 0)) for p, n in demand.items())


def random_node(
    rng: random.Random, n: int
) -> tuple[list[PoolGpu], dict[str, int], dict[str, float]]:
    geom = geometry()
    layouts = maximal_layouts(geom)
    gpus = []
    for i in range(n):
        placed = place(geom, dict(layouts[rng.randrange(len(layouts))]))
        assert placed.instances is not None
        in_use = tuple(x for x in placed.instances if rng.random() < 0.5)
        gpus.append(PoolGpu(f"node/gpu{i}", geom, placed.instances, in_use))
    profiles = ["1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]
    demand = {p: rng.randint(0, 3) for p in profiles}
    weight = {p: float(rng.randint(1, 3)) for p in profiles}
    return gpus, demand, weight


@pytest.mark.parametrize("seed", range(12))
def test_two_gpu_node_plan_matches_brute_force(seed: int) -> None:
    gpus, demand, weight = random_node(random.Random(seed), 2)
    best = brute_force(gpus, demand, weight)
    assert served(gpus, demand, weight, None) == best
    assert node_optimum(gpus, demand, weight) == best


@pytest.mark.parametrize("seed", range(6))
def test_a_limit_on_changed_gpus_is_kept_and_the_plan_is_best_within_it(seed: int) -> None:
    gpus, demand, weight = random_node(random.Random(100 + seed), 2)
    assert served(gpus, demand, weight, 1) == brute_force(gpus, demand, weight, max_changed=1)


def test_node_plan_beats_planning_gpu_by_gpu() -> None:
    """A node found by search where each GPU's best alone (against what the other offers now)
    serves 6 of the 7 weighted demand the node can serve: the node plan reaches all 7."""
    gpus, demand, weight = random_node(random.Random(37), 2)
    best = brute_force(gpus, demand, weight)
    assert best == 7.0

    def value(plans: list[GpuPlan]) -> float:
        total: Counter[str] = Counter()
        for g in gpus:
            plan = next((p for p in plans if p.gpu == g.gpu), None)
            total.update(i.profile for i in set(plan.layout if plan else g.current) - set(g.in_use))
        return sum(weight.get(p, 1.0) * min(n, demand.get(p, 0)) for p, n in total.items())

    want = Counter({p: n for p, n in demand.items() if n > 0})
    free_of = {g.gpu: Counter(i.profile for i in set(g.current) - set(g.in_use)) for g in gpus}
    assert value(per_gpu_plans(gpus, free_of, Counter(), want, weight, None, None)) == 6.0
    node = plan_node(gpus, demand, weight)
    assert node is not None
    assert value(node) == best
