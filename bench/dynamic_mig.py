"""Static MIG layouts against dynamic MIG on the three-team example.

    python bench/dynamic_mig.py [--days 2] [--seed 42] [--load 1.0] [--reconfigure 60]
                                [--granularity gpu|instance] [--drain] [--json]

Runs the example's synthetic trace under the gpucarve policy twice: as written (every A100 of
the production pool carved 3g.40gb + 2g.20gb + 2 × 1g.10gb, for good) and with
`mig.dynamic` on that pool (the same starting layout, repartitioned on demand, each change
taking `--reconfigure` seconds). In both runs production's MIG quota is all the pool can hold
and the other teams borrow from it, so placement, not quota, decides what waits. Prints, for
each: MIG workloads completed and never started (acceptance), the production pool's
allocation (GPUs used), MIG workloads' wait p50/p95, the production pool's fragmentation
(slices free but of no use to what waits) and repartitions.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import sys
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from figures import print_figures

from gpucarve.config.catalog_file import packaged_catalog
from gpucarve.config.examples import POLICY, example_path
from gpucarve.config.policy_build import build_policy
from gpucarve.core.policy import Pool
from gpucarve.core.workload import GpuKind
from gpucarve.sim.run.metrics import percentile, summarize
from gpucarve.sim.run.records import SimConfig
from gpucarve.sim.run.runner import Simulator
from gpucarve.sim.traces.synthetic import DAY, generate, three_teams

EXAMPLE = example_path(POLICY)
POOL = "production"


def _count(pool: Pool, profile: str) -> int:
    return sum(1 for i in pool.mig_layouts[0] if i.profile == profile)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--days", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--load", type=float, default=1.0)
    ap.add_argument("--reconfigure", type=int, default=60)
    ap.add_argument("--granularity", choices=["gpu", "instance"], default="gpu")
    ap.add_argument(
        "--drain", action="store_true", help="mig.dynamic.drain (granularity gpu): see engine.drain"
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    doc: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    catalog = packaged_catalog()
    static_policy = build_policy(doc, catalog, str(EXAMPLE)).policy
    pool = next(p for p in static_policy.pools if p.name == POOL)
    assert pool.model.mig is not None
    most = {p.name: p.max_instances for p in pool.model.mig.profiles}
    dyn = copy.deepcopy(doc)
    for p in dyn["pools"]:
        if p["name"] == POOL:
            p["mig"]["dynamic"] = {
                "minSecondsBetweenChanges": 600,
                "maxGpusPerCycle": 4,
                "granularity": args.granularity,
                "drain": args.drain,
            }
    # The example's MIG quotas bind before its layout does (production may hold 4 of the 32
    # 1g.10gb): in both runs production's nominal quota is all the pool can hold of each
    # profile (as laid out, or at most per GPU when dynamic) and the other teams borrow it,
    # so that placement, not quota, decides what waits.
    for d, dynamic in ((doc, False), (dyn, True)):
        for q in d["queues"]:
            for f in [f for f in q["quota"] if f.startswith("a100-mig-")]:
                profile = f.removeprefix("a100-mig-")
                if q["name"] == "production":
                    n = pool.gpus * (most[profile] if dynamic else _count(pool, profile))
                    q["quota"][f] = {"nominal": n}
                else:
                    q["quota"][f] = {"nominal": 0}
    static_policy = build_policy(doc, catalog, str(EXAMPLE)).policy
    dynamic_policy = build_policy(dyn, catalog, str(EXAMPLE)).policy
    scenario = three_teams(args.days)
    teams = tuple(
        dataclasses.replace(t, arrivals_per_hour=t.arrivals_per_hour * args.load)
        for t in scenario.teams
    )
    trace = generate(static_policy, dataclasses.replace(scenario, teams=teams), args.seed)
    mig = {w.id for w in trace.workloads for ps in w.pod_sets if ps.gpu.kind is GpuKind.MIG}
    figures: dict[str, object] = {"workloads": len(trace.workloads), "MIG workloads": len(mig)}
    window = (0, int(args.days * DAY))
    for name, policy in (("static", static_policy), ("dynamic", dynamic_policy)):
        sim = Simulator(
            policy,
            trace.workloads,
            trace.utilisation,
            SimConfig(mig_reconfigure_s=args.reconfigure),
        )
        result = sim.run()
        s = summarize(result, trace.utilisation, window)
        waits = [
            result.first_start.get(w, result.end) - result.submitted[w].submit_time for w in mig
        ]
        pool = s["pools"][POOL]
        figures[f"{name}: MIG completed"] = sum(1 for w in mig if w in result.completed)
        figures[f"{name}: MIG never started"] = sum(1 for w in mig if w not in result.first_start)
        figures[f"{name}: {POOL} allocation"] = pool["allocation"]
        figures[f"{name}: {POOL} fragmentation"] = pool["fragmentation"]
        figures[f"{name}: MIG wait p50 s"] = percentile(waits, 50)
        figures[f"{name}: MIG wait p95 s"] = percentile(waits, 95)
        figures[f"{name}: repartitions"] = len(result.repartitions)
    print_figures(figures, args.json)


if __name__ == "__main__":
    main()
