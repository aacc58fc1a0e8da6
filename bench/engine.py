"""Engine throughput: pods placed per second and cycle time on large synthetic clusters.

    python bench/engine.py [--json] [--cases 1000,5000] [--pods 10000] [--cycles 20] [--seed 1]
        [--no-delta] [--max-pods-per-cycle N|none|default] [--consolidate N]
        [--scoring NAME=WEIGHT,...]
    python bench/engine.py --cases 20000 --pods 100000 --cycles 10     # the 20,000-node case

Cluster per case: half the nodes H100 (8 whole GPUs, exclusive), a quarter A100-80GB carved
3g.40gb + 2g.20gb + 2 × 1g.10gb, a quarter L40S time-sliced 8 ways, in four queues of one cohort.
Pending: `--pods` pods in workloads of mixed kinds (whole GPUs 1/2/4/8 per pod, MIG instances,
shared replicas, fractions, and gangs of 8-64 pods). The first cycle sees all of them; each
later cycle finishes a tenth of what runs and submits a new batch; each snapshot is derived from
the last with its delta, as the simulator does (`--no-delta`: rebuilt, so that the engine compares
every allocation, as it does for the scheduler's view). The engine indexes the cluster before
the first cycle (`Engine.follow`, as a driver does when it starts), timed apart as "engine
start". Each cycle places at most `scheduling.maxPodsPerCycle` pods (the policy's default
unless `--max-pods-per-cycle` says otherwise); what it leaves waits for the next. Throughput
counts pods placed over the time spent inside `run_cycle`; `--consolidate N` sets
`scheduling.consolidateMaxMoves` (moves are counted and printed); cycle p50/p99 are over all cycles,
the first included; memory is the
process's peak resident set so far (cases run in the order given, so list them smallest
first).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from gpucarve.config.catalog_file import packaged_catalog
from gpucarve.config.policy_build import build_policy
from gpucarve.config.workload_spec import build_workload
from gpucarve.core.cluster import build_cluster
from gpucarve.core.policy import Policy
from gpucarve.core.problems import InvalidInput
from gpucarve.core.snapshot import Snapshot
from gpucarve.core.workload import Workload
from gpucarve.engine import Cause, Engine
from gpucarve.engine.apply import apply, finish

TEAMS = ("a", "b", "c", "d")


def make_policy(
    nodes: int,
    max_pods: int | str | None = "default",
    moves: int | None = None,
    scoring: dict[str, int] | None = None,
) -> Policy:
    h100, a100 = nodes // 2, nodes // 4
    l40s = nodes - h100 - a100
    per = {
        "h100-full": h100 * 8,
        "a100-mig-3g.40gb": a100 * 8,
        "a100-mig-2g.20gb": a100 * 8,
        "a100-mig-1g.10gb": a100 * 16,
        "l40s-shared": l40s * 8 * 8,
    }
    quota = {f: {"nominal": n // len(TEAMS)} for f, n in per.items()}
    doc: dict[str, Any] = {
        "apiVersion": "gpucarve.io/v1alpha1",
        "kind": "Policy",
        "metadata": {"name": "bench"},
        "pools": [
            {
                "name": "h100",
                "gpuModel": "H100-SXM5-80GB",
                "nodes": h100,
                "gpusPerNode": 8,
                "sharing": "exclusive",
                "cpusPerNode": 192,
                "memoryGiBPerNode": 2048,
                "topology": {"nodesPerRack": 16, "nodesPerNvlinkDomain": 1},
            },
            {
                "name": "a100",
                "gpuModel": "A100-80GB",
                "nodes": a100,
                "gpusPerNode": 8,
                "sharing": "mig",
                "mig": {"layout": {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}},
            },
            {
                "name": "l40s",
                "gpuModel": "L40S",
                "nodes": l40s,
                "gpusPerNode": 8,
                "sharing": "time-slicing",
                "replicas": 8,
            },
        ],
        "cohorts": [{"name": "all"}],
        "queues": [{"name": t, "namespaces": [t], "cohort": "all", "quota": quota} for t in TEAMS],
        "scheduling": {"minRuntimeSeconds": 0},
    }
    if max_pods != "default":
        doc["scheduling"]["maxPodsPerCycle"] = max_pods
    if moves is not None:
        doc["scheduling"]["consolidateMaxMoves"] = moves
    if scoring is not None:
        doc["scheduling"]["scoring"] = scoring
    return build_policy(doc, packaged_catalog()).policy


def make_workloads(p: Policy, pods: int, rng: random.Random, start: int, t: int) -> list[Workload]:
    out: list[Workload] = []
    made = 0
    i = start
    while made < pods:
        kind = rng.random()
        count, topology = 1, "none"
        limits: dict[str, int] = {}
        annotations: dict[str, str] = {}
        if kind < 0.30:
            limits["nvidia.com/gpu"] = rng.choice((1, 1, 2, 4, 8))
        elif kind < 0.40:
            count = rng.choice((8, 16, 32, 64))
            limits["nvidia.com/gpu"] = 8 if count <= 16 else rng.choice((1, 2, 4, 8))
            topology = "rack" if count <= 16 and rng.random() < 0.5 else "none"
        elif kind < 0.65:
            profile = rng.choice(("3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"))
            limits[f"nvidia.com/mig-{profile}"] = 1
            count = rng.choice((1, 1, 2, 4))
        elif kind < 0.85:
            limits["nvidia.com/gpu.shared"] = 1
        else:
            annotations["gpucarve.io/gpu-fraction"] = str(rng.choice((250, 500)))
            annotations["gpucarve.io/gpu-memory"] = str(rng.choice((8000, 16000)))
        team = rng.choice(TEAMS)
        doc = {
            "name": f"w{i}",
            "namespace": team,
            "submitTime": t,
            "topology": topology,
            "podSets": [
                {
                    "count": count,
                    "resources": {"limits": limits, "requests": {"cpu": "1"}},
                    "annotations": annotations,
                }
            ],
        }
        w, problems = build_workload(doc, p)
        assert w is not None, problems
        out.append(w)
        made += count
        i += 1
    return out


def run_case(
    nodes: int,
    pods: int,
    cycles: int,
    seed: int,
    no_delta: bool = False,
    max_pods: int | str | None = "default",
    moves: int | None = None,
    scoring: dict[str, int] | None = None,
) -> dict[str, Any]:
    rng = random.Random(seed)
    p = make_policy(nodes, max_pods, moves, scoring)
    pending = make_workloads(p, pods, rng, 0, 0)
    snap = Snapshot(p, build_cluster(p), (), tuple(pending))
    next_id = len(pending) + 1
    times: list[float] = []
    placed = moved = 0
    engine = Engine()
    t0 = time.perf_counter()
    engine.follow(snap)  # indexing the cluster, as the scheduler does when it starts
    start = time.perf_counter() - t0
    for c in range(cycles):
        t0 = time.perf_counter()
        result = engine.run_cycle(snap, now=c * 60)
        times.append(time.perf_counter() - t0)
        placed += result.stats.pods_placed
        moved += sum(1 for e in result.evictions if e.cause is Cause.CONSOLIDATE)
        snap = apply(snap, result)
        # a tenth of what runs completes; a new batch arrives
        done = [rw.workload.id for rw in snap.running if rng.random() < 0.1]
        snap = finish(snap, *done)
        batch = make_workloads(p, pods // 10, rng, next_id, (c + 1) * 60)
        next_id += len(batch) + 1
        if no_delta:  # rebuilt, as the Kubernetes scheduler's view is: every allocation compared
            snap = Snapshot(p, snap.cluster, snap.running, (*snap.pending, *batch))
        else:  # derived, as the simulator does: the engine follows what changed
            snap = dataclasses.replace(snap, pending=(*snap.pending, *batch))
    total = sum(times)
    ordered = sorted(times)
    return {
        "nodes": nodes,
        "gpus": nodes * 8,
        "pods": pods,
        "cycles": cycles,
        "pods_placed": placed,
        "pods_per_second": round(placed / total, 1) if total else 0.0,
        "cycle_p50_ms": round(statistics.median(times) * 1000, 1),
        "cycle_p99_ms": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1000, 1),
        "first_cycle_ms": round(times[0] * 1000, 1),
        "engine_start_ms": round(start * 1000, 1),
        "max_pods_per_cycle": p.scheduling.max_pods_per_cycle,
        "moves": moved,
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--cases", default="1000,5000", help="comma-separated node counts")
    ap.add_argument("--pods", type=int, default=10_000)
    ap.add_argument("--cycles", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="one JSON object per case")
    ap.add_argument(
        "--max-pods-per-cycle",
        default="default",
        help="scheduling.maxPodsPerCycle: a number, 'none' (no bound) or 'default' (the "
        "policy's default)",
    )
    ap.add_argument(
        "--consolidate",
        type=int,
        default=None,
        help="scheduling.consolidateMaxMoves (default: unset, no consolidation)",
    )
    ap.add_argument(
        "--scoring",
        default=None,
        help="scheduling.scoring as NAME=WEIGHT,... (default: the policy's default profile, "
        "binpack=1,fragmentation=2); without fragmentation the engine places by per-node scores",
    )
    ap.add_argument(
        "--no-delta",
        action="store_true",
        help="rebuild each cycle's snapshot without the delta from the last (as the scheduler's "
        "view does): the engine then compares every allocation to follow the cluster",
    )
    args = ap.parse_args()
    bound: int | str | None = args.max_pods_per_cycle
    if bound == "none":
        bound = None
    elif bound != "default":
        bound = int(bound)
    scoring = None
    if args.scoring is not None:
        try:
            scoring = {k: int(v) for k, v in (x.split("=") for x in args.scoring.split(","))}
        except ValueError:
            sys.exit(f"--scoring {args.scoring}: NAME=WEIGHT,..., e.g. binpack=1,spread=1")
    try:  # the options become policy fields: checked as the policy checks them, once
        make_policy(int(args.cases.split(",")[0]), bound, args.consolidate, scoring)
    except InvalidInput as exc:
        said = [f"{'.'.join(map(str, p.path))}: {p.message} (fix: {p.fix})" for p in exc.problems]
        sys.exit("; ".join(said))
    for n in (int(x) for x in args.cases.split(",")):
        row = run_case(
            n, args.pods, args.cycles, args.seed, args.no_delta, bound, args.consolidate, scoring
        )
        if args.json:
            print(json.dumps(row), flush=True)
        else:
            print(
                f"{row['nodes']:>5} nodes ({row['gpus']} GPUs), {row['pods']} pods: "
                f"{row['pods_per_second']:>8} pods/s, cycle p50 {row['cycle_p50_ms']} ms, "
                f"p99 {row['cycle_p99_ms']} ms, first cycle {row['first_cycle_ms']} ms "
                f"({row['pods_placed']} pods placed in {row['cycles']} cycles, at most "
                f"{row['max_pods_per_cycle']} a cycle, {row['moves']} moves), "
                f"engine start {row['engine_start_ms']} ms, "
                f"peak memory {row['peak_rss_mib']:,} MiB",
                flush=True,
            )


if __name__ == "__main__":
    main()
