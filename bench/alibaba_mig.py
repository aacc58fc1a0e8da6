"""Static MIG layouts against dynamic MIG on a MIG workload derived from the Alibaba trace.

    python bench/alibaba_mig.py [--pods PODS.csv] [--model A100-80GB] [--nodes 2]
                                [--days 7] [--speedup 1] [--reconfigure 60]
                                [--granularity gpu|instance] [--drain] [--json]

The trace (`$GPUCARVE_TRACES/alibaba-gpu-v2023/`, default `../shared/traces`; the README says
where to get it) has no MIG. Its single-GPU pods become MIG workloads: a pod asking for
`gpu_milli` of one GPU gets the smallest profile (by compute slices, then memory) whose compute
share of the GPU holds it: on an A100-80GB or H100-80GB, up to 142 milli -> 1g.10gb, 285 ->
2g.20gb, 428 -> 3g.40gb, 571 -> 4g.40gb, above (no 5g or 6g profile exists) and whole GPUs ->
7g.80gb. Multi-GPU and CPU-only pods are left out (counted). Arrival = creation time, duration
= deletion - scheduled time, as the importer; `--days` of arrivals from the first percentile of
arrival times (the trace's first 115 days hold a handful of pods), brought closer by
`--speedup` (durations unchanged) for more contention.

One pool of `--nodes` × 8 GPUs, one queue owning all of it. Static: every GPU keeps the
layout the planner picks for the trace's average mix of concurrent instances (a careful
administrator's choice: `perGpu` layouts carved for the expected demand, not one layout for
all). Dynamic: the same starting layouts with `mig.dynamic` (each change takes
`--reconfigure` seconds). Prints per run: workloads started within 5 min of arrival
(acceptance), never started, GPUs with an instance in use (time-weighted mean: active
hardware) and slice allocation, wait p50/p95, the share of compute slices free while work
waits (slices wasted on the wrong shapes) and repartitions.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from figures import print_figures

from gpucarve.config.catalog_file import packaged_catalog
from gpucarve.config.policy_build import build_policy
from gpucarve.config.workload_spec import build_workload
from gpucarve.core.catalog import MigGeometry
from gpucarve.core.mig import profiles_by_size, smallest_profile_for
from gpucarve.core.policy import Policy
from gpucarve.core.workload import Workload
from gpucarve.sim.recommend.proposals import layouts_for
from gpucarve.sim.run.metrics import percentile, summarize
from gpucarve.sim.run.records import SimConfig, SimResult
from gpucarve.sim.run.runner import Simulator
from gpucarve.sim.traces.alibaba_csv import TracePod, read_pods

TRACES = os.environ.get("GPUCARVE_TRACES") or Path(__file__).resolve().parents[2] / "shared/traces"
TRACE = Path(TRACES) / "alibaba-gpu-v2023"
ACCEPT_S = 300
DAY = 86_400


def workloads(
    pods: list[TracePod], geom: MigGeometry, policy: Policy, days: float, speedup: float
) -> tuple[list[Workload], Counter[str]]:
    left_out: Counter[str] = Counter()
    single = [p for p in pods if p.num_gpu == 1]
    left_out["multi-GPU pods"] = sum(1 for p in pods if p.num_gpu > 1)
    left_out["CPU-only pods"] = sum(1 for p in pods if p.num_gpu == 0)
    # The trace's first weeks are nearly empty (a few pods in 115 days, then thousands): the
    # window starts at the first percentile of arrivals.
    times = sorted(p.creation for p in single)
    t0 = times[len(times) // 100]
    out = []
    for p in sorted(single, key=lambda p: (p.creation, p.name)):
        if not 0 <= p.creation - t0 < days * DAY:
            left_out["arrived outside the window"] += 1
            continue
        profile = smallest_profile_for(p.gpu_milli, geom)
        doc: dict[str, Any] = {
            "name": p.name,
            "namespace": "alibaba",
            "queue": "alibaba",
            "submitTime": int((p.creation - t0) / speedup),
            "duration": max(1, p.duration),
            "podSets": [{"resources": {"limits": {f"nvidia.com/mig-{profile}": 1}}}],
        }
        w, problems = build_workload(doc, policy)
        assert w is not None, problems
        out.append(w)
    return out, left_out


def policy_doc(
    model: str,
    nodes: int,
    per_gpu: list[dict[str, int]],
    dynamic: bool,
    granularity: str = "gpu",
    drain: bool = False,
) -> Any:
    flavor = packaged_catalog().lookup(model).flavor_prefix
    profiles = sorted({p for layout in per_gpu for p in layout})
    geom = packaged_catalog().lookup(model).mig
    assert geom is not None
    mig: dict[str, Any] = {
        "perGpu": [{"gpus": [i], "layout": layout} for i, layout in enumerate(per_gpu)]
    }
    if dynamic:
        profiles = [name for _, name in profiles_by_size(geom)]
        mig["dynamic"] = {
            "minSecondsBetweenChanges": 600,
            "maxGpusPerCycle": 8,
            "profiles": profiles,
            "granularity": granularity,
            "drain": drain,
        }
    most = {p.name: p.max_instances for p in geom.profiles}

    def held(profile: str) -> int:
        if dynamic:
            return len(per_gpu) * most[profile]
        return sum(layout.get(profile, 0) for layout in per_gpu)

    return {
        "apiVersion": "gpucarve.io/v1alpha1",
        "kind": "Policy",
        "metadata": {"name": "alibaba-mig"},
        "pools": [
            {
                "name": "mig",
                "gpuModel": model,
                "nodes": nodes,
                "gpusPerNode": len(per_gpu),
                "sharing": "mig",
                "mig": mig,
            }
        ],
        "queues": [
            {
                "name": "alibaba",
                "namespaces": ["alibaba"],
                # all the pool can hold of each profile: placement, not quota, decides
                "quota": {f"{flavor}-mig-{p}": {"nominal": nodes * held(p)} for p in profiles},
            }
        ],
    }


def static_layouts(
    ws: list[Workload], geom: MigGeometry, gpus: int, profile_of: dict[str, str]
) -> list[dict[str, int]]:
    """Layouts of one node's `gpus` empty GPUs planned for the trace's mean concurrent
    instances per profile, scaled to fill them (`gpucarve simulate --recommend`'s planner)."""
    span = max(1, max(w.submit_time for w in ws) - min(w.submit_time for w in ws))
    mean: Counter[str] = Counter()
    for w in ws:
        mean[profile_of[w.id]] += (w.duration or 0) / span
    return layouts_for(dict(mean), geom, gpus)


def active_gpus(result: SimResult, window: tuple[int, int]) -> float:
    """Time-weighted mean of GPUs with at least one instance in use."""
    events: list[tuple[int, str, int]] = []
    for iv in result.intervals:
        start, end = max(iv.start, window[0]), min(iv.end, window[1])
        if start >= end:
            continue
        for pod in iv.pods:
            for sid in pod.slice_ids:
                gpu = sid.rsplit("/", 1)[0]
                events.append((start, gpu, 1))
                events.append((end, gpu, -1))
    events.sort(key=lambda e: (e[0], e[2]))  # ends before starts at the same time
    held: Counter[str] = Counter()
    area = 0.0
    last = window[0]
    for t, gpu, d in events:
        area += len(held) * (t - last)
        last = t
        held[gpu] += d
        if held[gpu] <= 0:
            del held[gpu]
    return area / max(1, window[1] - window[0])


def idle_while_waiting(
    result: SimResult, ws: list[Workload], window: tuple[int, int], geom: MigGeometry, gpus: int
) -> float:
    """Time-weighted mean share of the pool's compute slices free while some MIG work waits:
    capacity stranded in instances of the wrong shape (or being reconfigured)."""
    size = {p.name: p.compute_slices for p in geom.profiles}
    events: list[tuple[int, int, int]] = []  # time, waiting delta, compute in use delta
    for w in ws:
        start = result.first_start.get(w.id, window[1])
        events += [(w.submit_time, 1, 0), (start, -1, 0)]
    for iv in result.intervals:
        c = sum(size[pod.slice_ids[0].rsplit("@", 1)[0].rsplit("/", 1)[1]] for pod in iv.pods)
        events += [(iv.start, 0, c), (iv.end, 0, -c)]
    events.sort()
    waiting = used = 0
    area = 0.0
    last = window[0]
    total = gpus * geom.compute_slices
    for t, dw, du in events:
        t = min(max(t, window[0]), window[1])
        if waiting > 0:
            area += (total - used) / total * (t - last)
        last = t
        waiting += dw
        used += du
    return area / max(1, window[1] - window[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--pods", type=Path, default=TRACE / "openb_pod_list_gpushare40.csv")
    ap.add_argument("--model", default="A100-80GB")
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--days", type=float, default=7.0)
    ap.add_argument("--speedup", type=float, default=1.0)
    ap.add_argument("--reconfigure", type=int, default=60)
    ap.add_argument("--granularity", choices=["gpu", "instance"], default="gpu")
    ap.add_argument(
        "--drain", action="store_true", help="mig.dynamic.drain (granularity gpu): see engine.drain"
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    catalog = packaged_catalog()
    geom = catalog.lookup(args.model).mig
    if geom is None:
        sys.exit(f"{args.model} has no MIG profiles")
    pods, _ = read_pods(args.pods)
    whole = [{profiles_by_size(geom)[-1][1]: 1}] * 8
    probe = build_policy(policy_doc(args.model, args.nodes, whole, True), catalog).policy
    ws, left_out = workloads(pods, geom, probe, args.days, args.speedup)
    profile_of = {w.id: profile_for_workload(w) for w in ws}
    layouts = static_layouts(ws, geom, 8, profile_of)
    figures: dict[str, object] = {
        "MIG workloads": len(ws),
        **{f"left out: {k}": v for k, v in sorted(left_out.items())},
        **{f"workloads {p}": n for p, n in sorted(Counter(profile_of.values()).items())},
        "static layouts": "; ".join(
            f"{n} × " + "+".join(f"{c}×{p}" for p, c in sorted(lay.items()))
            for lay, n in _grouped(layouts)
        ),
    }
    end = max(w.submit_time for w in ws)
    window = (0, end)
    for name, dynamic in (("static", False), ("dynamic", True)):
        # every node carries the same per-GPU layouts, one per GPU index
        doc = policy_doc(args.model, args.nodes, layouts, dynamic, args.granularity, args.drain)
        policy = build_policy(doc, catalog).policy
        ws_p, _ = workloads(pods, geom, policy, args.days, args.speedup)
        sim = Simulator(policy, ws_p, None, SimConfig(mig_reconfigure_s=args.reconfigure))
        result = sim.run()
        s = summarize(result, None, window)
        waits = [result.first_start.get(w.id, result.end) - w.submit_time for w in ws_p]
        accepted = sum(
            1
            for w in ws_p
            if result.first_start.get(w.id, end + ACCEPT_S + 1) - w.submit_time <= ACCEPT_S
        )
        pool = s["pools"]["mig"]
        figures[f"{name}: accepted within 5 min %"] = round(100 * accepted / len(ws_p), 2)
        figures[f"{name}: never started"] = len(result.never_started)
        figures[f"{name}: active GPUs (mean)"] = round(active_gpus(result, window), 2)
        figures[f"{name}: slice allocation"] = pool["allocation"]
        figures[f"{name}: compute idle while work waits"] = round(
            idle_while_waiting(result, ws_p, window, geom, args.nodes * 8), 4
        )
        figures[f"{name}: wait p50 s"] = percentile(waits, 50)
        figures[f"{name}: wait p95 s"] = percentile(waits, 95)
        figures[f"{name}: repartitions"] = len(result.repartitions)
    print_figures(figures, args.json)


def profile_for_workload(w: Workload) -> str:
    profile = w.pod_sets[0].gpu.profile
    assert profile is not None
    return profile


def _grouped(layouts: list[dict[str, int]]) -> list[tuple[dict[str, int], int]]:
    out: list[tuple[dict[str, int], int]] = []
    for lay in layouts:
        for i, (seen, n) in enumerate(out):
            if seen == lay:
                out[i] = (seen, n + 1)
                break
        else:
            out.append((lay, 1))
    return out


if __name__ == "__main__":
    main()
