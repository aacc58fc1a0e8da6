"""Keeping GPUs working while work waits: the example policy with reservations and reclaim's
sparing of large gangs off (the default, as the engine was) and on, side by side in one run.

    python bench/keep_busy.py [--seeds 42-45] [--loads 1,2] [--days 2] [--after 43200]

Each variant replays the same synthetic trace (`gpucarve simulate`'s, per seed and load). Prints
per variant, seed and load: GPU-hours lost to preemption, the training pool's allocation,
research's wait until its last start (p95), production's and data science's wait (p95), and the
mean over the seeds. Variants: both off; reservations alone (reserveAfterSeconds 900); reclaim
sparing alone (reclaimLargeVictimRatio 4, reclaimLargeVictimAfterSeconds `--after`); both.
Figures, not assertions: tests check the mechanisms, this shows what they buy.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from gpucarve.config.examples import POLICY, example_path
from gpucarve.config.policy_build import load_policy
from gpucarve.core.policy import Policy
from gpucarve.sim.metrics import summarize
from gpucarve.sim.policy_scenario import scenario_for
from gpucarve.sim.records import SimConfig
from gpucarve.sim.runner import Simulator
from gpucarve.sim.synthetic import DAY, generate

HOUR = 3600.0


def variants(policy: Policy, after: int) -> dict[str, Policy]:
    s = policy.scheduling
    off = dataclasses.replace(s, reserve_after_s=None, reclaim_large_ratio=None)
    reserve = dataclasses.replace(off, reserve_after_s=900)
    spare = dataclasses.replace(off, reclaim_large_ratio=4, reclaim_large_after_s=after)
    both = dataclasses.replace(spare, reserve_after_s=900)
    return {
        name: dataclasses.replace(policy, scheduling=sched)
        for name, sched in (
            ("before (both off)", off),
            ("reservations", reserve),
            (f"spare large ({after // 3600} h)", spare),
            ("both", both),
        )
    }


def run(policy: Policy, seed: int, load: float, days: float) -> dict[str, float]:
    scenario = scenario_for(policy, days)
    teams = tuple(
        dataclasses.replace(t, arrivals_per_hour=t.arrivals_per_hour * load) for t in scenario.teams
    )
    trace = generate(policy, dataclasses.replace(scenario, teams=teams), seed)
    result = Simulator(policy, trace.workloads, trace.utilisation, SimConfig()).run()
    summary: dict[str, Any] = summarize(result, trace.utilisation, (0, int(days * DAY)))
    teams_out = summary["teams"]
    return {
        "lost GPU-h": summary["gpu_hours_lost_to_preemption"],
        "training alloc %": 100 * summary["pools"]["training"]["allocation"],
        "research last-start p95 h": teams_out["research"]["wait_until_last_start_p95_s"] / HOUR,
        "production p95 h": teams_out["production"]["wait_p95_s"] / HOUR,
        "data-science p95 h": teams_out["data-science"]["wait_p95_s"] / HOUR,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="42-45")
    ap.add_argument("--loads", default="1,2")
    ap.add_argument("--days", type=float, default=2.0)
    ap.add_argument("--after", type=int, default=43200)
    args = ap.parse_args()
    lo, _, hi = args.seeds.partition("-")
    seeds = list(range(int(lo), int(hi or lo) + 1))
    loads = [float(x) for x in args.loads.split(",")]
    policy = load_policy(example_path(POLICY)).policy
    cases = variants(policy, args.after)
    for load in loads:
        print(f"\nload {load:g}, seeds {seeds[0]}-{seeds[-1]}, {args.days:g} days")
        header = None
        for name, p in cases.items():
            rows = [run(p, seed, load, args.days) for seed in seeds]
            if header is None:
                header = list(rows[0])
                print(f"{'variant':22s} " + " ".join(f"{h:>26s}" for h in header))
            cells = []
            for h in header:
                values = [r[h] for r in rows]
                per_seed = "/".join(f"{v:.0f}" if v >= 10 else f"{v:.1f}" for v in values)
                cells.append(f"{statistics.mean(values):6.1f} ({per_seed})")
            print(f"{name:22s} " + " ".join(f"{c:>26s}" for c in cells))


if __name__ == "__main__":
    main()
