"""Fair share over time on the example: the policy as shipped (queues take turns by what they
borrow now) against the same policy with `scheduling.usageHalfLifeSeconds` set, side by side
on the same synthetic traces.

    python bench/fairness.py [--seeds 46-49] [--loads 1,2] [--days 2]
        [--half-lives 3600,21600,86400]

Prints per variant and load, the mean over the seeds (each seed after it): per pool shared by
more than one queue, the largest deviation of a queue's received share from its entitled share
over the whole run and in its worst hour, and the mean of Jain's index per hour
(`sim/run/fairness.py`); the hours queues waited below their share while another queue ran
above its own (summed over queues and pools), GPU-hours lost to preemption, and research's,
production's and data science's wait p95. Figures, not assertions: the tests check the
mechanism, this shows what it buys and costs.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from keep_busy import summary_of

from gpucarve.config.examples import POLICY, example_path
from gpucarve.config.policy_build import load_policy
from gpucarve.core.policy import Policy

HOUR = 3600.0


def run(policy: Policy, seed: int, load: float, days: float) -> dict[str, float]:
    summary = summary_of(policy, seed, load, days)
    out: dict[str, float] = {}
    below = 0.0
    for _, pools in sorted(summary["fairness"].items()):
        for pool, f in sorted(pools.items()):
            if len([q for q in f["queues"].values() if q["share_entitled"] > 0]) < 2:
                continue  # one queue alone in a pool shares nothing
            out[f"{pool}: off over run"] = f["deviation_over_window"]
            out[f"{pool}: worst hour"] = f["deviation_worst_hour"]
            out[f"{pool}: Jain"] = f["jain_mean"]
            below += sum(q["hours_below_share_while_another_above"] for q in f["queues"].values())
    teams = summary["teams"]
    return out | {
        "h below share": below,
        "lost GPU-h": summary["gpu_hours_lost_to_preemption"],
        "research p95 h": teams["research"]["wait_p95_s"] / HOUR,
        "production p95 h": teams["production"]["wait_p95_s"] / HOUR,
        "data-science p95 h": teams["data-science"]["wait_p95_s"] / HOUR,
    }


def _range(text: str, ap: argparse.ArgumentParser) -> list[int]:
    lo, _, hi = text.partition("-")
    if not lo.isdigit() or not (hi or lo).isdigit() or int(hi or lo) < int(lo):
        ap.error(f"--seeds {text!r}: give a seed or a range such as 46-49")
    return list(range(int(lo), int(hi or lo) + 1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="46-49")
    ap.add_argument("--loads", default="1,2")
    ap.add_argument("--days", type=float, default=2.0)
    ap.add_argument("--half-lives", default="3600,21600,86400")
    args = ap.parse_args()
    seeds = _range(args.seeds, ap)
    try:
        loads = [float(x) for x in args.loads.split(",")]
        half_lives = [int(x) for x in args.half_lives.split(",")]
    except ValueError:
        ap.error("--loads and --half-lives: give numbers separated by commas, such as 1,2")
    if any(not 60 <= h <= 90 * 86400 for h in half_lives):
        ap.error("--half-lives: each from 60 to 7776000 seconds (usageHalfLifeSeconds' range)")
    policy = load_policy(example_path(POLICY)).policy
    cases = {"as shipped (no half-life)": policy} | {
        f"half-life {h / 3600:g} h": dataclasses.replace(
            policy, scheduling=dataclasses.replace(policy.scheduling, usage_half_life_s=h)
        )
        for h in half_lives
    }
    for load in loads:
        print(f"\nload {load:g}, seeds {seeds[0]}-{seeds[-1]}, {args.days:g} days")
        header: list[str] | None = None
        for name, p in cases.items():
            rows = [run(p, seed, load, args.days) for seed in seeds]
            if header is None:
                header = list(rows[0])
                print(f"{'variant':26s} " + " ".join(f"{h:>30s}" for h in header))
            cells = []
            for h in header:
                values = [r.get(h, 0.0) for r in rows]
                per_seed = "/".join(f"{v:.2f}" if v < 10 else f"{v:.0f}" for v in values)
                cells.append(f"{statistics.mean(values):6.2f} ({per_seed})")
            print(f"{name:26s} " + " ".join(f"{c:>30s}" for c in cells))


if __name__ == "__main__":
    main()
