"""`gpucarve simulate --recommend` on the built-in example, timed: the whole search (derived on
one seed, judged on others) as a user runs it, per load, with what the chosen policy buys on the
judge seeds against the policy as read.

    python bench/recommend_search.py [--seed 42] [--derive-seeds 1] [--judge-seeds 3]
        [--loads 1,2] [--days 2] [--jobs 2]
        [--minimize wasted-gpu-hours|lost-gpu-hours|idle-gpu-hours]

Prints per load: the search's wall time and replays, the chosen policy, GPU-hours lost to
preemption (as read → chosen), each queue's wait p95 against its bound, and each pool's GPUs
held against its demand bound. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from gpucarve.config.examples import POLICY, example_path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--derive-seeds", type=int, default=1)
    ap.add_argument("--judge-seeds", type=int, default=3)
    ap.add_argument("--loads", default="1,2")
    ap.add_argument("--days", type=float, default=2.0)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--minimize", default="")
    args = ap.parse_args()
    doc = yaml.safe_load(example_path(POLICY).read_text())
    if args.minimize:
        doc["objective"]["minimize"] = args.minimize
    exe = Path(sys.executable).with_name("gpucarve")
    with tempfile.TemporaryDirectory() as tmp:
        policy = Path(tmp) / "policy.yaml"
        policy.write_text(yaml.safe_dump(doc, sort_keys=False))
        for load in args.loads.split(","):
            out = Path(tmp) / f"load-{load}"
            out.mkdir()
            cmd = [str(exe), "simulate", "--policy", str(policy), "--compare", "gpucarve",
                   "--recommend", "--seed", str(args.seed), "--derive-seeds",
                   str(args.derive_seeds), "--judge-seeds",
                   str(args.judge_seeds), "--load", load, "--days", str(args.days),
                   "--jobs", str(args.jobs), "--json", "--out", str(out)]  # fmt: skip
            t0 = time.perf_counter()
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            took = time.perf_counter() - t0
            if done.returncode != 0:
                sys.exit(f"load {load}: exit {done.returncode}\n{done.stderr[-3000:]}")
            report(load, took, json.loads(done.stdout)["recommendation"], doc)


def report(load: str, took: float, rec: dict[str, object], doc: dict[str, object]) -> None:
    judged = {j["policy"]: j for j in rec["judged"]}  # type: ignore[attr-defined]
    base, chosen = judged["the policy as read"], judged[rec["chosen"]]  # type: ignore[index]
    print(f"load {load}: search {took:.0f} s, {rec['replays']} replays, "
          f"derived on {rec['derived_on']}, judged on {rec['judged_on']}")  # fmt: skip
    print(f"  chosen: {rec['chosen']}")
    print(f"  GPU-hours lost to preemption: {base['gpu_hours_lost_to_preemption']:.1f} → "
          f"{chosen['gpu_hours_lost_to_preemption']:.1f}; idle while work waited "
          f"{base['idle_while_waiting_gpu_hours']:.1f} → "
          f"{chosen['idle_while_waiting_gpu_hours']:.1f}")  # fmt: skip
    named = doc["objective"]["waitP95Seconds"]  # type: ignore[index]
    for q, h in base["wait_p95_h"].items():
        bound = f"{named[q] / 3600:.1f} h" if q in named else "as read +10 %"
        print(f"  {q} wait p95: {h:.2f} → {chosen['wait_p95_h'][q]:.2f} h (bound {bound})")
    print(f"  past bounds: {chosen['queues_past_bounds'] or 'none'}")
    for pool, most in rec["demand_bound_gpus"].items():  # type: ignore[attr-defined]
        b, c = base["held_gpus"][pool], chosen["held_gpus"][pool]
        print(f"  {pool}: {b:.1f} → {c:.1f} GPUs held of a demand bound of {most:.1f} "
              f"({b / most:.0%} → {c / most:.0%})")  # fmt: skip


if __name__ == "__main__":
    main()
