"""A cluster's history rebuilt from what its Prometheus kept of kube-state-metrics.

Each pod that asked for GPUs is read from the series kube-state-metrics exports for it, each
taken at its last value over the window (`last_over_time`), so pods deleted long ago count:
its creation (`kube_pod_created`), the time it was scheduled (`kube_pod_status_scheduled_time`)
and finished (`kube_pod_completion_time`), its last phase (`kube_pod_status_phase`), its GPU
requests (`kube_pod_container_resource_requests`, extended resources sanitised to
`nvidia_com_…`), its owner (`kube_pod_owner`: a Job's pods are one workload), its node and
priority class (`kube_pod_info`), the scheduler that bound it (`kube_pod_scheduler`), and the
last second any series of it was scraped (the end of a pod deleted before it finished).

The result is the history format `history replay` reads (`sim/traces/recorded.py`), in Unix
seconds, and a count of what could not be recovered and why."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpucarve.sim.traces.recorded import Recorded

Series = list[tuple[dict[str, str], float]]  # (labels, value) of an instant vector

# name -> PromQL, `{w}` the window (e.g. 30d) and `{s}` the resolution of the last-seen scan
QUERIES = {
    "created": "last_over_time(kube_pod_created[{w}])",
    "scheduled": "last_over_time(kube_pod_status_scheduled_time[{w}])",
    "completed": "last_over_time(kube_pod_completion_time[{w}])",
    "phase": "last_over_time(kube_pod_status_phase[{w}]) == 1",
    # one series per container and resource: the `node` label changes when the pod is bound
    "gpus": "max by (namespace, pod, uid, container, resource) (last_over_time("
    'kube_pod_container_resource_requests{{resource=~"nvidia_com_.*"}}[{w}]))',
    "owner": "last_over_time(kube_pod_owner[{w}])",
    "info": "last_over_time(kube_pod_info[{w}])",
    "scheduler": "last_over_time(kube_pod_scheduler[{w}])",
    "seen": "max_over_time(timestamp(kube_pod_created)[{w}:{s}])",
}
MIG = re.compile(r"^nvidia_com_mig_(\d+)g_(\d+)gb((?:_[a-z]+)*)$")
MAX_ANSWER = 512 * 1024 * 1024


def resource_name(sanitised: str) -> str | None:
    """The device plugin's resource name behind kube-state-metrics' label (None: not a GPU
    resource gpucarve reads)."""
    if sanitised == "nvidia_com_gpu":
        return "nvidia.com/gpu"
    if sanitised == "nvidia_com_gpu_shared":
        return "nvidia.com/gpu.shared"
    m = MIG.match(sanitised)
    if m is None:
        return None
    extras = "".join(f"+{x}" for x in m.group(3).split("_") if x)
    return f"nvidia.com/mig-{m.group(1)}g.{m.group(2)}gb{extras}"


class PrometheusError(RuntimeError):
    pass


@dataclass(frozen=True)
class Prometheus:
    """Prometheus's HTTP API: one instant query."""

    url: str
    timeout_s: float = 60.0

    def query(self, promql: str, at: int) -> Series:
        params = urllib.parse.urlencode({"query": promql, "time": str(at)})
        target = f"{self.url.rstrip('/')}/api/v1/query?{params}"
        try:
            with urllib.request.urlopen(target, timeout=self.timeout_s) as reply:
                body = reply.read(MAX_ANSWER + 1)
        except urllib.error.HTTPError as exc:
            detail = exc.read(4096).decode("utf-8", errors="replace")
            raise PrometheusError(f"{self.url} refused {promql}: {exc.code} {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise PrometheusError(
                f"{self.url} did not answer: {getattr(exc, 'reason', exc)}"
            ) from None
        if len(body) > MAX_ANSWER:
            raise PrometheusError(f"{promql} answered more than 512 MiB: import a shorter --since")
        doc = json.loads(body)
        if doc.get("status") != "success":
            raise PrometheusError(f"{self.url} answered {doc.get('error', doc)} for {promql}")
        return [
            (dict(r.get("metric") or {}), float(r["value"][1]))
            for r in (doc.get("data") or {}).get("result") or []
        ]


@dataclass
class Pod:
    namespace: str
    name: str
    created: int | None = None
    scheduled: int | None = None
    completed: int | None = None
    seen: int | None = None
    phase: str | None = None
    limits: dict[str, int] = field(default_factory=dict)
    owner: tuple[str, str] | None = None
    node: str = ""
    priority_class: str = ""
    scheduler: str = ""


@dataclass
class Rebuilt:
    lines: list[dict[str, Any]] = field(default_factory=list)
    # why a pod (or its GPUs) could not be recovered -> how many pods
    unrecovered: dict[str, int] = field(default_factory=dict)

    def miss(self, why: str) -> None:
        self.unrecovered[why] = self.unrecovered.get(why, 0) + 1


def fetch(prom: Prometheus, now: int, window_s: int, step_s: int) -> dict[str, Series]:
    """Every query's answer at `now` over the last `window_s` seconds."""
    w, s = f"{window_s}s", f"{step_s}s"
    return {name: prom.query(q.format(w=w, s=s), now) for name, q in QUERIES.items()}


def _key(labels: Mapping[str, str]) -> tuple[str, str, str]:
    return labels.get("namespace", ""), labels.get("pod", ""), labels.get("uid", "")


def _pods(answers: Mapping[str, Series], out: Rebuilt) -> dict[tuple[str, str, str], Pod]:
    pods: dict[tuple[str, str, str], Pod] = {}

    def pod(labels: Mapping[str, str]) -> Pod:
        k = _key(labels)
        if k not in pods:
            pods[k] = Pod(k[0], k[1])
        return pods[k]

    for labels, value in answers.get("gpus", []):
        name = resource_name(labels.get("resource", ""))
        if name is None:
            out.miss(f"a GPU resource gpucarve does not read ({labels.get('resource')})")
            continue
        p = pod(labels)
        p.limits[name] = p.limits.get(name, 0) + round(value)
    for name, read in READERS.items():
        for labels, value in answers.get(name, []):
            if (found := pods.get(_key(labels))) is not None:
                read(found, labels, value)
    return pods


def _owner(p: Pod, labels: Mapping[str, str], _: float) -> None:
    if labels.get("owner_kind") == "Job":
        p.owner = ("Job", labels.get("owner_name", ""))


def _info(p: Pod, labels: Mapping[str, str], _: float) -> None:
    # a pod has a series from before its binding (no node) and one after
    p.node = labels.get("node") or p.node
    p.priority_class = labels.get("priority_class") or p.priority_class


def _time(field_name: str) -> Callable[[Pod, Mapping[str, str], float], None]:
    def read(p: Pod, _: Mapping[str, str], value: float) -> None:
        setattr(p, field_name, int(value))

    return read


# what each answer tells of a pod already known to ask for GPUs
READERS: dict[str, Callable[[Pod, Mapping[str, str], float], None]] = {
    "created": _time("created"),
    "scheduled": _time("scheduled"),
    "completed": _time("completed"),
    "seen": _time("seen"),
    "phase": lambda p, labels, _: setattr(p, "phase", labels.get("phase")),
    "owner": _owner,
    "info": _info,
    "scheduler": lambda p, labels, _: setattr(p, "scheduler", labels.get("name", "")),
}


def rebuild(answers: Mapping[str, Series], now: int, gone_after_s: int = 120) -> Rebuilt:
    """The history of the pods that asked for GPUs (a Job's pods are one workload; a pod
    whose series stopped `gone_after_s` before `now` without finishing was deleted)."""
    out = Rebuilt()
    groups: dict[tuple[str, str, str], list[Pod]] = {}
    for (ns, name, uid), p in _pods(answers, out).items():
        if p.created is None:
            out.miss("no kube_pod_created sample")
            continue
        key = (ns, p.owner[1], "") if p.owner is not None else (ns, name, uid)
        groups.setdefault(key, []).append(p)
    for (namespace, name, _), members in sorted(groups.items()):
        out.lines.append(_line(namespace, name, members, now, gone_after_s))
    return out


def _end(p: Pod, now: int, gone_after_s: int) -> tuple[int | None, str]:
    """When a pod ended and how (None: it still ran or waited at the last scrape)."""
    if p.phase in ("Succeeded", "Failed"):
        return (p.completed if p.completed is not None else p.seen), p.phase
    if p.seen is not None and now - p.seen > gone_after_s:  # gone from the scrapes: deleted
        return p.seen, "Deleted"
    return None, "Running" if p.scheduled is not None else "Pending"


def _line(
    namespace: str, name: str, members: list[Pod], now: int, gone_after_s: int
) -> dict[str, Any]:
    first = min(members, key=lambda p: (p.created or 0, p.name))
    sets: dict[str, dict[str, Any]] = {}
    for p in members:
        sig = json.dumps(sorted(p.limits.items()))
        entry = sets.setdefault(sig, {"name": f"set-{len(sets)}", "count": 0,
                                      "resources": {"limits": dict(p.limits)}})  # fmt: skip
        entry["count"] += 1
    ends = [_end(p, now, gone_after_s) for p in members]
    scheduled = [p.scheduled for p in members if p.scheduled is not None]
    started = max(scheduled) if len(scheduled) == len(members) else None
    open_ = any(t is None for t, _ in ends)
    ended = None if open_ else max(t for t, _ in ends if t is not None)
    hows = {how for _, how in ends}
    outcome = (
        ("Running" if started is not None else "Pending") if open_
        else "Failed" if "Failed" in hows
        else "Succeeded" if hows == {"Succeeded"}
        else "Deleted"
    )  # fmt: skip
    until = now if ended is None else ended
    doc: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "submitTime": min(p.created or 0 for p in members),
        "duration": max(1, until - started) if started is not None else 1,
        "podSets": list(sets.values()),
    }
    if first.priority_class:
        doc["priorityClass"] = first.priority_class
    nodes = tuple(sorted({p.node for p in members if p.node}))
    doc["recorded"] = Recorded(
        () if started is None else (started,), (), ended, outcome, nodes, first.scheduler
    ).as_doc()
    return doc
