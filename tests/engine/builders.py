"""Builders for engine tests: a policy and workloads as data, snapshots, and running cycles."""

from __future__ import annotations

import copy
import random
from typing import Any

from gpucarve.config.catalog_file import packaged_catalog
from gpucarve.config.policy_build import build_policy
from gpucarve.config.workload_spec import build_workload
from gpucarve.core.cluster import build_cluster
from gpucarve.core.policy import Policy
from gpucarve.core.snapshot import Snapshot
from gpucarve.core.workload import Workload
from gpucarve.engine import CycleResult, run_cycle
from gpucarve.engine.apply import apply

HEAD = {"apiVersion": "gpucarve.io/v1alpha1", "kind": "Policy", "metadata": {"name": "t"}}


def policy(**sections: Any) -> Policy:
    doc = copy.deepcopy(HEAD)
    doc.update(sections)
    return build_policy(doc, packaged_catalog()).policy


def pool(
    name: str, model: str, nodes: int, gpus: int, sharing: str = "exclusive", **extra: Any
) -> dict[str, Any]:
    return {
        "name": name,
        "gpuModel": model,
        "nodes": nodes,
        "gpusPerNode": gpus,
        "sharing": sharing,
        **extra,
    }


def queue(
    name: str, quota: dict[str, Any], cohort: str | None = None, **extra: Any
) -> dict[str, Any]:
    q: dict[str, Any] = {"name": name, "namespaces": [name], "quota": quota, **extra}
    if cohort:
        q["cohort"] = cohort
    return q


def workload(
    p: Policy,
    name: str,
    queue: str,
    *,
    gpus: int = 0,
    mig: str | None = None,
    shared: int = 0,
    fraction: int = 0,
    gpu_memory: int = 0,
    pods: int = 1,
    min_pods: int | None = None,
    priority: str | None = None,
    submit: int = 0,
    topology: str = "none",
    cpu: str | None = None,
    memory: str | None = None,
    node_selector: dict[str, str] | None = None,
    tolerations: list[dict[str, str]] | None = None,
    duration: int | None = None,
) -> Workload:
    limits: dict[str, int] = {}
    if gpus:
        limits["nvidia.com/gpu"] = gpus
    if mig:
        count, _, profile = mig.partition("x") if "x" in mig else ("1", "", mig)
        limits[f"nvidia.com/mig-{profile}"] = int(count)
    if shared:
        limits["nvidia.com/gpu.shared"] = shared
    requests: dict[str, str | int] = {}
    if cpu:
        requests["cpu"] = cpu
    if memory:
        requests["memory"] = memory
    annotations = {}
    if fraction:
        annotations["gpucarve.io/gpu-fraction"] = str(fraction)
    if gpu_memory:
        annotations["gpucarve.io/gpu-memory"] = str(gpu_memory)
    ps: dict[str, Any] = {
        "name": "main",
        "count": pods,
        "resources": {"limits": limits, "requests": requests},
        "annotations": annotations,
    }
    if min_pods is not None:
        ps["minCount"] = min_pods
    if node_selector:
        ps["nodeSelector"] = node_selector
    if tolerations:
        ps["tolerations"] = tolerations
    doc: dict[str, Any] = {
        "name": name,
        "namespace": queue,
        "queue": queue,
        "submitTime": submit,
        "topology": topology,
        "podSets": [ps],
    }
    if priority:
        doc["priorityClass"] = priority
    if duration:
        doc["duration"] = duration
    w, problems = build_workload(doc, p)
    assert w is not None, problems
    return w


def snapshot(p: Policy, pending: list[Workload] = ()) -> Snapshot:  # type: ignore[assignment]
    return Snapshot(p, build_cluster(p), (), tuple(pending))


def cycle(s: Snapshot, now: int = 0) -> tuple[CycleResult, Snapshot]:
    """Run one cycle and apply it; checks the snapshot's invariants before and after."""
    assert s.check() == []
    result = run_cycle(s, now)
    after = apply(s, result)
    assert after.check() == [], after.check()
    return result, after


def submit(s: Snapshot, *ws: Workload) -> Snapshot:
    return Snapshot(s.policy, s.cluster, s.running, (*s.pending, *ws), usage=s.usage)


def running_ids(s: Snapshot) -> list[str]:
    return [rw.workload.id for rw in s.running]


def slices_held(s: Snapshot, workload_id: str) -> list[str]:
    rw = next(r for r in s.running if r.workload.id == workload_id)
    return [sid for p in rw.pods for sid in p.slice_ids]


def mixed_policy() -> Policy:
    """Whole H100s, carved A100s and time-sliced L40S, two queues of one cohort, two
    preemptible priorities and no minimum runtime: every kind of take and give-back."""
    return policy(
        pools=[
            pool("h", "H100-SXM5-80GB", 3, 8),
            pool("m", "A100-80GB", 2, 2, "mig",
                 mig={"layout": {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}}),
            pool("s", "L40S", 2, 2, "time-slicing", replicas=4),
        ],
        cohorts=[{"name": "c"}],
        queues=[
            queue(n, {"h100-full": {"nominal": 12}, "a100-mig-1g.10gb": {"nominal": 4},
                      "a100-mig-3g.40gb": {"nominal": 2}, "l40s-shared": {"nominal": 8}},
                  cohort="c")
            for n in ("a", "b")
        ],
        priorityClasses=[{"name": "lo", "value": 0, "preemptible": True, "default": True},
                         {"name": "hi", "value": 9, "preemptible": True}],
        scheduling={"minRuntimeSeconds": 0},
    )  # fmt: skip


def mixed_arrivals(p: Policy, rng: random.Random, step: int) -> list[Workload]:
    """One to five workloads of mixed kinds, queues and priorities, submitted at `step`."""
    out = []
    for i in range(rng.randint(1, 5)):
        kind = rng.choice(["gpus", "mig", "shared"])
        if kind == "gpus":
            kw: dict[str, Any] = {"gpus": rng.choice([1, 2, 8])}
        elif kind == "mig":
            kw = {"mig": rng.choice(["1g.10gb", "3g.40gb"])}
        else:
            kw = {"shared": 1}
        out.append(
            workload(
                p,
                f"w{step}-{i}",
                rng.choice("ab"),
                pods=rng.randint(1, 3),
                priority=rng.choice(["lo", "hi"]),
                submit=step,
                **kw,
            )
        )
    return out
