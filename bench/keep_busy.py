"""Keeping GPUs working while work waits: the example policy with reservations, reclaim's
sparing of large gangs, reclaim's grace and consolidation off (the defaults) and on, side by
side in one run.

    python bench/keep_busy.py [--seeds 42-45] [--loads 1,2] [--days 2] [--after 43200]
        [--grace 7200] [--ratio 4] [--only NAME,...] [--bound QUEUE=SECONDS]...

Each variant replays the same synthetic trace (`gpucarve simulate`'s, per seed and load). Prints
per variant, seed and load: GPU-hours lost to preemption, the training pool's allocation,
research's wait until its last start (p95), production's and data science's wait (p95), and the
mean over the seeds. Variants: both off; reservations alone (reserveAfterSeconds 900); reclaim
sparing alone (reclaimLargeVictimRatio `--ratio`, reclaimLargeVictimAfterSeconds `--after`); both;
reclaim's grace alone (reclaimGraceSeconds `--grace`); sparing and grace; consolidation alone
(consolidateMaxMoves 4); sparing, grace and consolidation; loans that wait for lenders'
waiting work (loansWaitForLenders) alone, with grace, with sparing and grace, and with all three.
`--only` runs the variants whose names start with one of the given prefixes; `--bound` gives
a queue's reclaimWaitSeconds (how long its work within nominal quota may wait for quota it lent)
in every variant but "before (all off)". Figures, not assertions: tests check the mechanisms,
this shows what they buy.
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
from gpucarve.sim.run.metrics import summarize
from gpucarve.sim.run.records import SimConfig
from gpucarve.sim.run.runner import Simulator
from gpucarve.sim.traces.policy_scenario import scenario_for
from gpucarve.sim.traces.synthetic import DAY, generate

HOUR = 3600.0
MOVES = 4  # consolidateMaxMoves of the consolidation variants


def variants(policy: Policy, after: int, grace: int, ratio: int = 4) -> dict[str, Policy]:
    s = policy.scheduling
    off = dataclasses.replace(
        s,
        reserve_after_s=None,
        reclaim_large_ratio=None,
        reclaim_grace_s=None,
        consolidate_max_moves=None,
        loans_wait_for_lenders=False,
    )
    reserve = dataclasses.replace(off, reserve_after_s=900)
    spare = dataclasses.replace(off, reclaim_large_ratio=ratio, reclaim_large_after_s=after)
    both = dataclasses.replace(spare, reserve_after_s=900)
    wait = dataclasses.replace(off, reclaim_grace_s=grace)
    spare_wait = dataclasses.replace(spare, reclaim_grace_s=grace)
    move = dataclasses.replace(off, consolidate_max_moves=MOVES)
    spare_wait_move = dataclasses.replace(spare_wait, consolidate_max_moves=MOVES)
    lw = {"loans_wait_for_lenders": True}
    return {
        name: dataclasses.replace(policy, scheduling=sched)
        for name, sched in (
            ("before (all off)", off),
            ("reservations", reserve),
            (f"spare large ({ratio}x, {after // 3600} h)", spare),
            ("reservations + spare", both),
            (f"reclaim grace ({grace // 60} min)", wait),
            ("spare + grace", spare_wait),
            (f"moves ({MOVES})", move),
            ("spare + grace + moves", spare_wait_move),
            ("loans wait", dataclasses.replace(off, **lw)),
            ("grace + loans wait", dataclasses.replace(wait, **lw)),
            ("spare + grace + loans wait", dataclasses.replace(spare_wait, **lw)),
            ("spare+grace+moves+loans wait", dataclasses.replace(spare_wait_move, **lw)),
        )
    }


def bounded(policy: Policy, bounds: list[str], ap: argparse.ArgumentParser) -> Policy:
    """`policy` with the queues' reclaimWaitSeconds `QUEUE=SECONDS` set."""
    given: dict[str, int] = {}
    for b in bounds:
        name, _, seconds = b.partition("=")
        if name not in {q.name for q in policy.queues} or not seconds.isdigit():
            ap.error(f"--bound {b!r}: give QUEUE=SECONDS for a queue of the example")
        given[name] = int(seconds)
    queues = tuple(
        dataclasses.replace(q, reclaim_wait_s=given[q.name]) if q.name in given else q
        for q in policy.queues
    )
    return dataclasses.replace(policy, queues=queues)


def summary_of(policy: Policy, seed: int, load: float, days: float) -> dict[str, Any]:
    """The example's synthetic trace for `seed` at `load` times its arrivals, replayed under
    `policy` and summarised over its `days` (`bench/fairness.py` reads it too)."""
    scenario = scenario_for(policy, days)
    teams = tuple(
        dataclasses.replace(t, arrivals_per_hour=t.arrivals_per_hour * load) for t in scenario.teams
    )
    trace = generate(policy, dataclasses.replace(scenario, teams=teams), seed)
    result = Simulator(policy, trace.workloads, trace.utilisation, SimConfig()).run()
    return summarize(result, trace.utilisation, (0, int(days * DAY)))


def run(policy: Policy, seed: int, load: float, days: float) -> dict[str, float]:
    summary = summary_of(policy, seed, load, days)
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
    ap.add_argument("--grace", type=int, default=7200, help="reclaimGraceSeconds variants")
    ap.add_argument(
        "--ratio", type=int, default=4, help="reclaimLargeVictimRatio of the sparing variants"
    )
    ap.add_argument("--scenario", choices=("example", "stream"), default="example")
    ap.add_argument("--only", default="", help="variant name prefixes, comma-separated")
    ap.add_argument("--bound", action="append", default=[], help="QUEUE=SECONDS")
    args = ap.parse_args()
    lo, _, hi = args.seeds.partition("-")
    if not lo.isdigit() or not (hi or lo).isdigit() or int(hi or lo) < int(lo):
        ap.error(f"--seeds {args.seeds!r}: give a seed or a range such as 42-45")
    seeds = list(range(int(lo), int(hi or lo) + 1))
    try:
        loads = [float(x) for x in args.loads.split(",")]
    except ValueError:
        ap.error(f"--loads {args.loads!r}: give numbers separated by commas, such as 1,2")
    if not 1 <= args.ratio <= 1000:  # reclaimLargeVictimRatio's range
        ap.error(f"--ratio {args.ratio}: give a whole number from 1 to 1000, such as 4")
    if args.scenario == "stream":
        stream(seeds, args.days)
        return
    policy = load_policy(example_path(POLICY)).policy
    cases = variants(policy, args.after, args.grace, args.ratio)
    if args.only:
        prefixes = [x for x in args.only.split(",") if x]
        cases = {n: p for n, p in cases.items() if any(n.startswith(x) for x in prefixes)}
        if not cases:
            ap.error(f"--only {args.only!r}: no variant starts with that")
    if args.bound:
        cases = {
            n: p if n.startswith("before") else bounded(p, args.bound, ap) for n, p in cases.items()
        }
    for load in loads:
        print(f"\nload {load:g}, seeds {seeds[0]}-{seeds[-1]}, {args.days:g} days")
        header = None
        for name, p in cases.items():
            rows = [run(p, seed, load, args.days) for seed in seeds]
            if header is None:
                header = list(rows[0])
                print(f"{'variant':24s} " + " ".join(f"{h:>26s}" for h in header))
            cells = []
            for h in header:
                values = [r[h] for r in rows]
                per_seed = "/".join(f"{v:.0f}" if v >= 10 else f"{v:.1f}" for v in values)
                cells.append(f"{statistics.mean(values):6.1f} ({per_seed})")
            print(f"{name:24s} " + " ".join(f"{c:>26s}" for c in cells))


def stream_policy(reserve: int | None) -> Policy:
    """Four 8-GPU nodes; `big` (nominal 24) runs 16-GPU two-node gangs, `small` (nominal 8,
    may borrow 24) a stream of short one- and two-GPU jobs that borrow whatever is idle."""
    from gpucarve.config.catalog_file import packaged_catalog
    from gpucarve.config.policy_build import build_policy

    doc = {
        "apiVersion": "gpucarve.io/v1alpha1",
        "kind": "Policy",
        "metadata": {"name": "stream"},
        "pools": [
            {"name": "train", "gpuModel": "H100-SXM5-80GB", "nodes": 4, "gpusPerNode": 8,
             "sharing": "exclusive"}
        ],
        "cohorts": [{"name": "c"}],
        "queues": [
            {"name": "big", "namespaces": ["big"], "cohort": "c",
             "quota": {"h100-full": {"nominal": 24}}},
            {"name": "small", "namespaces": ["small"], "cohort": "c",
             "quota": {"h100-full": {"nominal": 8, "borrowingLimit": 24}}},
        ],
        "scheduling": {"reserveAfterSeconds": reserve},
    }  # fmt: skip
    return build_policy(doc, packaged_catalog()).policy


def stream_workloads(policy: Policy, seed: int, days: float) -> list[Any]:
    import math
    import random

    from gpucarve.config.workload_spec import build_workload

    rng = random.Random(seed)
    out = []
    for queue, per_hour, pods, gpus, lo, hi in (
        ("big", 0.25, 2, 8, 4 * 3600, 10 * 3600),
        ("small", 10.0, 1, 0, 1800, 2 * 3600),
    ):
        t, n = 0.0, 0
        while True:
            t += rng.expovariate(per_hour / 3600)
            if t >= days * DAY:
                break
            n += 1
            size = gpus or rng.choice([1, 2])
            doc = {
                "name": f"{queue}-{n}", "namespace": queue, "queue": queue,
                "submitTime": int(t),
                "duration": int(math.exp(rng.uniform(math.log(lo), math.log(hi)))),
                "podSets": [{"name": "main", "count": pods,
                             "resources": {"limits": {"nvidia.com/gpu": size}}}],
            }  # fmt: skip
            w, problems = build_workload(doc, policy)
            assert w is not None, problems
            out.append(w)
    return sorted(out, key=lambda w: (w.submit_time, w.id))


def stream(seeds: list[int], days: float) -> None:
    """A big gang behind a stream of small borrowing jobs, with and without reservations."""
    print(f"\nstream scenario (4 x 8 H100; 16-GPU gangs within nominal, short 1-2 GPU jobs "
          f"borrowing), seeds {seeds[0]}-{seeds[-1]}, {days:g} days")  # fmt: skip
    for name, reserve in (("without reservations", None), ("reservations (900 s)", 900)):
        rows = []
        for seed in seeds:
            p = stream_policy(reserve)
            ws = stream_workloads(p, seed, days)
            result = Simulator(p, ws, {}, SimConfig()).run()
            s = summarize(result, {}, (0, int(days * DAY)))
            rows.append(
                (
                    s["gpu_hours_lost_to_preemption"],
                    100 * s["allocation"],
                    s["teams"]["big"]["wait_until_last_start_p95_s"] / HOUR,
                    s["teams"]["small"]["wait_p95_s"] / HOUR,
                )
            )
        mean = [statistics.mean(r[i] for r in rows) for i in range(4)]
        print(
            f"{name:24s} lost {mean[0]:6.1f} GPU-h  allocated {mean[1]:5.1f} %  "
            f"big last-start p95 {mean[2]:5.1f} h  small p95 {mean[3]:5.1f} h"
        )


if __name__ == "__main__":
    main()
