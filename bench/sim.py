"""Simulator scale: the three-team example scaled up, replayed end to end.

    python bench/sim.py [--scale 55] [--days 7] [--seed 1] [--policy gpucarve] [--batch 10] [--json]
    python bench/sim.py --curve 10,20,40,80 [--load 0.22] [--days 1] [--target-nodes 10000]
        [--target-workloads 1000000] [--target-days 30]

The example's pools and quotas are multiplied by `--scale` (55: 990 nodes, 2,970 GPUs) and so
are its teams' arrival rates, so load per GPU stays the example's; `--days` of arrivals (7 at
scale 55: about 100,000 workloads). Prints workloads, nodes, engine cycles and wall-clock
seconds for the run (generation excluded), and cycles per second. `--batch N` runs one engine
cycle per N-second period, as a scheduler on a timer does (0: a cycle at every event).

`--curve S1,S2,…` measures the scaling curve instead: one run per scale (nodes and quotas ×S,
arrivals ×S×`--load`) over `--days`, the wall-clock seconds per simulated day at each, a power
law fitted through them (seconds per day = c · nodes^k, least squares in log-log), and what it
predicts for `--target-nodes` nodes and `--target-workloads` over `--target-days` (the load
follows from those; `--load` defaults to it). Cycles come one per `--batch` period while work
waits, so a run's cost is days × the cost of a day at its size.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
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
from gpucarve.sim.run.baselines import POLICIES
from gpucarve.sim.run.records import SimConfig
from gpucarve.sim.run.runner import Simulator
from gpucarve.sim.traces.synthetic import Scenario, generate, three_teams

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


def scaled_scenario(scale: float, days: float) -> Scenario:
    base = three_teams(days)
    teams = tuple(
        dataclasses.replace(t, arrivals_per_hour=t.arrivals_per_hour * scale) for t in base.teams
    )
    return dataclasses.replace(base, teams=teams)


def run_once(
    scale: int, arrivals: float, days: float, seed: int, name: str, batch: int
) -> dict[str, Any]:
    policy = scaled_policy(scale)
    trace = generate(policy, scaled_scenario(arrivals, days), seed)
    make_policy, make_workloads = POLICIES[name]
    sim = Simulator(
        make_policy(policy), make_workloads(trace.workloads), trace.utilisation,
        SimConfig(batch_s=batch),
    )  # fmt: skip
    cycles = 0

    def tick(now: int, done: int) -> None:
        nonlocal cycles
        cycles += 1

    start = time.perf_counter()
    result = sim.run(progress=tick)
    wall = time.perf_counter() - start
    return {
        "nodes": sum(p.nodes for p in policy.pools),
        "workloads": len(trace.workloads),
        "completed": len(result.completed),
        "cycles": cycles,
        "wall_s": wall,
    }


def curve(args: argparse.Namespace, scales: list[int]) -> None:
    base_nodes = sum(p.nodes for p in scaled_policy(1).pools)
    per_day = len(generate(scaled_policy(1), scaled_scenario(1, 1.0), args.seed).workloads)
    target_scale = args.target_nodes / base_nodes
    target_per_day = args.target_workloads / args.target_days
    load = args.load if args.load is not None else target_per_day / (per_day * target_scale)
    print(
        f"target: {args.target_nodes:,} nodes, {args.target_workloads:,} workloads over "
        f"{args.target_days:g} days (arrivals x{load:.3f} the example's per node)",
        flush=True,
    )
    xs, ys = [], []
    for scale in scales:
        row = run_once(scale, scale * load, args.days, args.seed, args.policy, args.batch)
        per = row["wall_s"] / args.days
        xs.append(math.log(row["nodes"]))
        ys.append(math.log(per))
        print(
            f"  {row['nodes']:>6,} nodes, {row['workloads']:>7,} workloads, {row['cycles']:>6,} "
            f"cycles: {row['wall_s']:7.1f} s ({per:7.1f} s per simulated day)",
            flush=True,
        )
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    k = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / max(
        1e-12, sum((x - mx) ** 2 for x in xs)
    )
    c = math.exp(my - k * mx)
    predicted = c * args.target_nodes**k * args.target_days
    print(
        f"fit: seconds per simulated day = {c:.4g} * nodes^{k:.2f}; predicted for the target: "
        f"{predicted:,.0f} s ({predicted / 60:,.1f} min; goal 10 min)",
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--scale", type=int, default=55)
    ap.add_argument("--days", type=float, default=7.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--policy", default="gpucarve", choices=sorted(POLICIES))
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--curve", default="", help="comma-separated scales: measure the curve")
    ap.add_argument("--load", type=float, default=None)
    ap.add_argument("--target-nodes", type=int, default=10_000)
    ap.add_argument("--target-workloads", type=int, default=1_000_000)
    ap.add_argument("--target-days", type=float, default=30.0)
    args = ap.parse_args()
    if args.curve:
        try:
            scales = [int(x) for x in args.curve.split(",")]
        except ValueError:
            ap.error(f"--curve {args.curve!r}: whole scales separated by commas, e.g. 10,20,40")
        if len(set(scales)) < 2 or min(scales) < 1:
            ap.error(f"--curve {args.curve!r}: two different scales of 1 or more fit a curve")
        curve(args, scales)
        return
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
