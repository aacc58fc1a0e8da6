"""Simulator scale: the three-team example scaled up, replayed end to end.

    python bench/sim.py [--scale 55] [--days 7] [--seed 1] [--policy gpucarve] [--batch 10] [--json]

The example's pools and quotas are multiplied by `--scale` (55: 990 nodes, 2,970 GPUs) and so
are its teams' arrival rates, so load per GPU stays the example's; `--days` of arrivals (7 at
scale 55: about 100,000 workloads). Prints workloads, nodes, engine cycles and wall-clock
seconds for the run (generation excluded), and cycles per second. `--batch N` runs one engine
cycle per N-second period, as a scheduler on a timer does (0: a cycle at every event).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from figures import print_figures

from gpucarve.config.catalog_file import packaged_catalog
from gpucarve.config.examples import POLICY, example_path
from gpucarve.config.policy_build import build_policy
from gpucarve.core.policy import Policy
from gpucarve.sim.baselines import POLICIES
from gpucarve.sim.records import SimConfig
from gpucarve.sim.runner import Simulator
from gpucarve.sim.synthetic import Scenario, generate, three_teams

EXAMPLE = example_path(POLICY)


def scaled_policy(scale: int) -> Policy:
    doc: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    for pool in doc["pools"]:
        pool["nodes"] *= scale
    for queue in doc["queues"]:
        for quota in queue["quota"].values():
            for key in ("nominal", "borrowingLimit", "lendingLimit"):
                if key in quota:
                    quota[key] *= scale
        for flavor in queue.get("maxPerWorkload", {}):
            queue["maxPerWorkload"][flavor] *= 1  # a workload's size does not scale
    return build_policy(doc, packaged_catalog(), str(EXAMPLE)).policy


def scaled_scenario(scale: int, days: float) -> Scenario:
    base = three_teams(days)
    teams = tuple(
        dataclasses.replace(t, arrivals_per_hour=t.arrivals_per_hour * scale) for t in base.teams
    )
    return dataclasses.replace(base, teams=teams)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--scale", type=int, default=55)
    ap.add_argument("--days", type=float, default=7.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--policy", default="gpucarve", choices=sorted(POLICIES))
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    policy = scaled_policy(args.scale)
    trace = generate(policy, scaled_scenario(args.scale, args.days), args.seed)
    make_policy, make_workloads = POLICIES[args.policy]
    sim = Simulator(
        make_policy(policy),
        make_workloads(trace.workloads),
        trace.utilisation,
        SimConfig(batch_s=args.batch),
    )
    cycles = 0

    def tick(now: int, done: int) -> None:
        nonlocal cycles
        cycles += 1
        if not args.json and cycles % 2000 == 0:
            print(f"  t={now / 3600:.1f} h, {done} done, {cycles} cycles", file=sys.stderr)

    start = time.perf_counter()
    result = sim.run(progress=tick)
    wall = time.perf_counter() - start
    figures = {
        "policy": args.policy,
        "nodes": sum(p.nodes for p in policy.pools),
        "gpus": sum(p.gpus for p in policy.pools),
        "workloads": len(trace.workloads),
        "completed": len(result.completed),
        "cycles": cycles,
        "wall_s": round(wall, 1),
        "cycles_per_s": round(cycles / wall, 1) if wall else None,
        "batch_s": args.batch,
    }
    print_figures(figures, args.json)


if __name__ == "__main__":
    main()
