"""MIG planner speed: plan a pool of `--gpus` A100-80GB GPUs against queued demand.

    python bench/mig.py [--gpus 1000] [--seed 1] [--json]

Each GPU starts in a random maximal layout with a random half of its instances in use; the
demand asks for a random mix of profiles, about a third of the pool's instances. Prints the
pool plan's wall time (first run, and best of the next two, when the per-state layout options
are cached as they are in a long-running scheduler), the same under the policy's default of at
most 8 GPUs changed per cycle, GPUs changed and demand left, and the one-GPU plan time. Then
`--nodes` sampled nodes of 8 GPUs, each with its own demand and priority weights, are planned
and compared with the exact optimum found without pruning (`mig_node.node_optimum`): the gap is
how much weighted demand the plan serves less than the best possible.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from figures import print_figures

from gpucarve.config.catalog_file import packaged_catalog
from gpucarve.core.catalog import MigGeometry
from gpucarve.core.mig import LayoutKey, maximal_layouts, place
from gpucarve.engine.mig.gpu_plan import PoolGpu, plan_gpu
from gpucarve.engine.mig.node_plan import node_optimum
from gpucarve.engine.mig.pool_plan import plan_pool


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--gpus", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--nodes", type=int, default=50)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    geom = packaged_catalog().lookup("A100-80GB").mig
    assert geom is not None
    layouts = maximal_layouts(geom)
    gpus = []
    total = 0
    for i in range(args.gpus):
        key = layouts[rng.randrange(len(layouts))]
        placed = place(geom, dict(key))
        assert placed.instances is not None
        current = placed.instances
        in_use = tuple(x for x in current if rng.random() < 0.5)
        total += len(current)
        gpus.append(PoolGpu(f"node{i // 8:04d}/{i % 8}", geom, current, in_use))
    profiles = ["1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]
    demand = dict.fromkeys(profiles, 0)
    for _ in range(total // 3):
        demand[rng.choice(profiles)] += 1
    runs = []
    for _ in range(3):
        start = time.perf_counter()
        plans, left = plan_pool(gpus, demand)
        runs.append(time.perf_counter() - start)
    capped = []
    for _ in range(3):
        start = time.perf_counter()
        plan_pool(gpus, demand, max_changed_gpus=8)
        capped.append(time.perf_counter() - start)
    gaps = [_node_gap(rng, geom, layouts, profiles) for _ in range(args.nodes)]
    one = []
    for g in gpus[:50]:
        start = time.perf_counter()
        plan_gpu(g.geom, g.gpu, g.current, g.in_use, demand)
        one.append(time.perf_counter() - start)
    figures = {
        "gpus": args.gpus,
        "demand": sum(demand.values()),
        "pool_plan_cold_ms": round(runs[0] * 1000, 1),  # layouts per GPU state not cached yet
        "pool_plan_warm_ms": round(min(runs[1:]) * 1000, 1),
        "pool_plan_8_gpus_ms": round(min(capped[1:]) * 1000, 1),
        "gpus_changed": len(plans),
        "demand_left": sum(left.values()),
        "one_gpu_plan_ms": round(1000 * sum(one) / len(one), 2),
    }
    figures["sampled_nodes"] = len(gaps)
    figures["nodes_at_optimum"] = sum(1 for g in gaps if g == 0)
    figures["node_gap_max_pct"] = round(100 * max(gaps, default=0.0), 2)
    print_figures(figures, args.json)


def _node_gap(
    rng: random.Random, geom: MigGeometry, layouts: tuple[LayoutKey, ...], profiles: list[str]
) -> float:
    gpus = []
    total = 0
    for i in range(8):
        placed = place(geom, dict(layouts[rng.randrange(len(layouts))]))
        assert placed.instances is not None
        in_use = tuple(x for x in placed.instances if rng.random() < 0.5)
        total += len(placed.instances)
        gpus.append(PoolGpu(f"sample/{i}", geom, placed.instances, in_use))
    demand = dict.fromkeys(profiles, 0)
    for _ in range(max(1, total // 3)):
        demand[rng.choice(profiles)] += 1
    weight = {p: float(rng.randint(1, 3)) for p in profiles}
    best = node_optimum(gpus, demand, weight)
    _, left = plan_pool(gpus, demand, weight)
    got = sum(weight[p] * (demand[p] - left.get(p, 0)) for p in profiles)
    return (best - got) / best if best else 0.0


if __name__ == "__main__":
    main()
