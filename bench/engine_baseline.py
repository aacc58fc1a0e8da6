"""The engine's throughput against another tree's, side by side on this machine: each round
runs `bench/engine.py` of this tree and of the tree at git REF (a temporary worktree, its own
`bench/engine.py` and `src`) once per case, alternating, and prints pods per second, cycle p99
and the ratio (this / REF) per round, then the median ratio per case.

    python bench/engine_baseline.py --baseline 99e47f2 [--cases 1000,5000] [--rounds 3]
        [--pods 10000] [--cycles 20] [--seed 1] [--json] [--scoring NAME=WEIGHT,...]

Only the options every tree's `bench/engine.py` has are passed (cases, pods, cycles, seed):
each tree runs with its own defaults otherwise (its policy's maxPodsPerCycle, for one).
`--scoring` goes to this tree's run alone (`scheduling.scoring`; the baseline keeps its own
scores): `fragmentation=0` measures the engine without its fragmentation model.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _run(
    tree: Path, nodes: int, args: argparse.Namespace, scoring: str | None = None
) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    sizes = ["--cases", str(nodes), "--pods", str(args.pods), "--cycles", str(args.cycles)]
    if scoring is not None:
        sizes += ["--scoring", scoring]
    cmd = [sys.executable, str(tree / "bench" / "engine.py"), "--json", *sizes,
           "--seed", str(args.seed)]  # fmt: skip
    done = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"{tree}: bench/engine.py failed: {done.stderr[-800:]}")
    row: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return row


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--baseline", required=True, help="a git ref to measure side by side")
    ap.add_argument("--cases", default="1000,5000", help="comma-separated node counts")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pods", type=int, default=10_000)
    ap.add_argument("--cycles", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="one JSON object per round and case")
    ap.add_argument(
        "--scoring", default=None, help="this tree's scheduling.scoring, NAME=WEIGHT,..."
    )
    args = ap.parse_args()
    try:
        cases = [int(x) for x in args.cases.split(",")]
    except ValueError:
        sys.exit(f"--cases {args.cases}: comma-separated node counts, e.g. 1000,5000")
    with tempfile.TemporaryDirectory(prefix="gpucarve-bench-") as work:
        wt = Path(work) / "baseline"
        git = ["git", "-C", str(ROOT), "worktree"]
        added = subprocess.run([*git, "add", "-q", "--detach", str(wt), args.baseline],
                               capture_output=True, text=True, check=False)  # fmt: skip
        if added.returncode != 0:
            sys.exit(f"--baseline {args.baseline}: not a commit git can check out "
                     f"({added.stderr.strip()})")  # fmt: skip
        try:
            ratios: dict[int, list[float]] = {n: [] for n in cases}
            for r in range(args.rounds):
                for n in cases:
                    this, then = _run(ROOT, n, args, args.scoring), _run(wt, n, args)
                    ratio = this["pods_per_second"] / max(then["pods_per_second"], 1e-9)
                    ratios[n].append(ratio)
                    row = {"round": r + 1, "nodes": n, "pods_per_second": this["pods_per_second"],
                           "baseline_pods_per_second": then["pods_per_second"],
                           "pods_placed": this["pods_placed"],
                           "baseline_pods_placed": then["pods_placed"],
                           "cycle_p99_ms": this["cycle_p99_ms"],
                           "baseline_cycle_p99_ms": then["cycle_p99_ms"],
                           "ratio": round(ratio, 3)}  # fmt: skip
                    if args.json:
                        print(json.dumps(row), flush=True)
                    else:
                        print(f"round {r + 1}, {n:>6} nodes: {this['pods_per_second']:>8} "
                              f"against {then['pods_per_second']:>8} pods/s ({ratio:.2f}x; "
                              f"{this['pods_placed']} against {then['pods_placed']} placed; "
                              f"p99 {this['cycle_p99_ms']} against "
                              f"{then['cycle_p99_ms']} ms)", flush=True)  # fmt: skip
            for n in cases:
                median = statistics.median(ratios[n])
                if args.json:
                    print(json.dumps({"nodes": n, "median_ratio": round(median, 3)}))
                else:
                    print(f"{n:>6} nodes: median {median:.2f}x {args.baseline}'s pods/s")
        finally:
            subprocess.run([*git, "remove", "--force", str(wt)], capture_output=True, check=False)


if __name__ == "__main__":
    main()
