"""The policy's `autoscaling:` entries, checked against the rest of the policy: one replica
of each Deployment is built as the scheduler would build its pod (`build_workload`: its
namespace's queue, the queue label where given, its resources and priority class), so an
entry the scheduler could never run is refused here, with the entry's own field named."""

from __future__ import annotations

from typing import Any

from gpucarve.config.policy_model import PolicySpec
from gpucarve.config.workload_spec import build_workload
from gpucarve.core.policy import Autoscale, Policy
from gpucarve.core.problems import Path, Problem, Severity
from gpucarve.core.vocabulary import QUEUE_LABEL


def _relocated(p: Problem, path: Path) -> Problem:
    """A replica's problem where the entry has it: its pod set's resources are the entry's
    `resources`, its queue label the entry's `queue`."""
    loc = p.path
    rest = loc[len(path) :]
    if rest[:1] == ("podSets",):
        loc = (*path, "resources")
    elif rest[:1] == ("labels",):
        loc = (*path, "queue")
    return Problem(loc, p.code, p.message, p.fix, p.severity, p.line)


def _entry(spec: PolicySpec, i: int, policy: Policy) -> tuple[Autoscale | None, list[Problem]]:
    a = spec.autoscaling[i]
    path: Path = ("autoscaling", i)
    if a.minReplicas > a.maxReplicas:
        return None, [Problem((*path, "minReplicas"), "min-above-max",
                              f"minReplicas {a.minReplicas} is above maxReplicas {a.maxReplicas}",
                              "raise maxReplicas or lower minReplicas")]  # fmt: skip
    gpu = dict(sorted(a.resources.items()))
    replica: dict[str, Any] = {
        "name": f"{a.deployment}-replica",
        "namespace": a.namespace,
        "podSets": [{"resources": {"requests": gpu, "limits": gpu}}],
    }
    if a.queue is not None:
        replica["labels"] = {QUEUE_LABEL: a.queue}
    if a.priorityClass is not None:
        replica["priorityClass"] = a.priorityClass
    workload, probs = build_workload(replica, policy, path)
    errs = [_relocated(p, path) for p in probs if p.severity is Severity.ERROR]
    if errs or workload is None:
        return None, errs
    entry = Autoscale(
        a.deployment, a.namespace, workload.queue, a.minReplicas, a.maxReplicas,
        tuple(gpu.items()), workload.priority_class or None, a.gpuUtilizationPercent,
        a.requestLatencyMs, a.latencyMetric, a.latencyQuantile,
        a.scaleUpStabilizationSeconds, a.scaleDownStabilizationSeconds,
    )  # fmt: skip
    return entry, []


def build_autoscaling(
    spec: PolicySpec, policy: Policy
) -> tuple[tuple[Autoscale, ...], list[Problem]]:
    out: list[Autoscale] = []
    problems: list[Problem] = []
    seen: dict[tuple[str, str], int] = {}
    for i, a in enumerate(spec.autoscaling):
        key = (a.namespace, a.deployment)
        if key in seen:
            message = f"{a.namespace}/{a.deployment} is autoscaled by autoscaling[{seen[key]}] too"
            problems.append(Problem(("autoscaling", i, "deployment"), "duplicate-autoscaling",
                                    message, "keep one entry per Deployment"))  # fmt: skip
            continue
        seen[key] = i
        entry, probs = _entry(spec, i, policy)
        problems.extend(probs)
        if entry is None:
            continue
        other = next((e for e in out if e.latency_metric == entry.latency_metric
                      and e.latency_ms is not None and entry.latency_ms is not None
                      and e.latency_quantile != entry.latency_quantile), None)  # fmt: skip
        if other is not None:
            # the adapter serves one metric per name: one quantile of one histogram
            problems.append(Problem(("autoscaling", i, "latencyQuantile"), "quantile-conflict",
                                    f"{entry.latency_metric} is read at {other.latency_quantile:g}"
                                    f" for {other.namespace}/{other.deployment}",
                                    f"use {other.latency_quantile:g} here too, or another "
                                    "latencyMetric"))  # fmt: skip
            continue
        out.append(entry)
    return tuple(out), problems
