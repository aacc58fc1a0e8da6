"""The MIG planner: exact per GPU (checked against brute force over every valid set of
instances), in-use instances never move, and a pool plan serves what the pool lacks."""

from __future__ import annotations

from collections import Counter

import pytest

from gpucarve.config.catalog_file import packaged_catalog
from gpucarve.core.catalog import MigGeometry
from gpucarve.core.mig import Instance, placement_problems
from gpucarve.engine.mig.gpu_plan import PoolGpu, plan_gpu
from gpucarve.engine.mig.pool_plan import plan_pool


def geometry(model: str) -> MigGeometry:
    geom = packaged_catalog().lookup(model).mig
    assert geom is not None
    return geom


def brute_force_best(
    geom: MigGeometry,
    in_use: tuple[Instance, ...],
    demand: dict[str, int],
    weight: dict[str, float],
) -> float:
    """Every valid set of instances that contains the in-use ones: the best weighted service."""
    cands = [Instance(s, p.name) for p in geom.profiles if "+me" not in p.name for s in p.starts]
    best = 0.0

    def value(free: list[Instance]) -> float:
        c = Counter(i.profile for i in free)
        return sum(weight.get(p, 1.0) * min(n, demand.get(p, 0)) for p, n in c.items())

    def dfs(i: int, chosen: list[Instance]) -> None:
        nonlocal best
        if i == len(cands):
            if not placement_problems(geom, [*in_use, *chosen]):
                best = max(best, value(chosen))
            return
        dfs(i + 1, chosen)
        trial = [*in_use, *chosen, cands[i]]
        if not placement_problems(geom, trial):
            dfs(i + 1, [*chosen, cands[i]])

    dfs(0, [])
    return best


CASES = [
    ("A100-80GB", (), {"1g.10gb": 9}, {}),
    ("A100-80GB", (Instance(0, "3g.40gb"),), {"2g.20gb": 2, "1g.10gb": 2}, {"2g.20gb": 3.0}),
    ("A100-80GB", (Instance(4, "1g.10gb"),), {"3g.40gb": 2, "4g.40gb": 1}, {}),
    ("H100-SXM5-80GB", (Instance(6, "1g.10gb"),), {"7g.80gb": 1, "2g.20gb": 3}, {}),
    ("A30-24GB", (), {"2g.12gb": 1, "1g.6gb": 3}, {"1g.6gb": 2.0}),
]


@pytest.mark.parametrize(("model", "in_use", "demand", "weight"), CASES)
def test_one_gpu_plan_is_optimal(
    model: str, in_use: tuple[Instance, ...], demand: dict[str, int], weight: dict[str, float]
) -> None:
    geom = geometry(model)
    current = (*in_use,)
    plan = plan_gpu(geom, "g", current, in_use, demand, weight)
    assert plan.value == pytest.approx(brute_force_best(geom, in_use, demand, weight))
    assert set(in_use) <= set(plan.layout)  # in-use instances stay where they are
    assert not placement_problems(geom, plan.layout)


def test_the_current_layout_stays_when_nothing_better_exists() -> None:
    geom = geometry("A100-80GB")
    current = (Instance(0, "3g.40gb"), Instance(4, "3g.40gb"))
    plan = plan_gpu(geom, "g", current, (), {"3g.40gb": 2})
    assert plan.changes == 0 and plan.layout == current
    assert "no layout" in plan.reason


def test_fewest_changes_among_equally_good_layouts() -> None:
    geom = geometry("A100-80GB")
    # 3g@4 is free and wanted; the 1g.10gb wanted fits beside it by re-carving only 0-3
    current = (Instance(0, "4g.40gb"), Instance(4, "3g.40gb"))
    plan = plan_gpu(geom, "g", current, (), {"3g.40gb": 1, "1g.10gb": 1})
    assert Instance(4, "3g.40gb") in plan.layout
    assert Instance(4, "3g.40gb") not in plan.destroyed


def test_pool_plan_serves_what_the_pool_lacks() -> None:
    geom = geometry("A100-80GB")
    three = (Instance(0, "3g.40gb"), Instance(4, "3g.40gb"))
    gpus = [PoolGpu(f"n{i}/0", geom, three, (Instance(0, "3g.40gb"),)) for i in range(3)]
    demand = {"3g.40gb": 2, "1g.10gb": 6}
    # three free 3g.40gb (each 3g@4), two wanted, and six 1g.10gb: counting instances, two
    # GPUs trade their free 3g for 3 × 1g.10gb each (7 instances served instead of 5)
    plans, left = plan_pool(gpus, demand)
    assert [p.gpu for p in plans] == ["n0/0", "n1/0"]
    assert left == {"3g.40gb": 1}
    # when a 3g.40gb is worth four 1g.10gb, only one GPU changes
    plans, left = plan_pool(gpus, demand, {"3g.40gb": 4.0})
    assert [p.gpu for p in plans] == ["n0/0"]
    assert Counter(i.profile for i in plans[0].created) == {"1g.10gb": 3}
    assert left == {"1g.10gb": 3}
    for p in plans:
        assert Instance(0, "3g.40gb") in p.layout  # in use: never moved
    plans, _ = plan_pool(gpus, demand, max_changed_gpus=1)
    assert len(plans) == 1
