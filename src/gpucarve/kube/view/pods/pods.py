"""Pending pods as gpucarve workloads: the scheduler's view of what waits.

Pods of one gang (a pod group label, or the labels of the controller that made them: Jobs,
JobSets, training operators, LeaderWorkerSets, Ray clusters; `kube/view/pods/owners.py`) form one
workload per group, needing the group's `minMember` pods at once; other pods are one workload
each. Pods of a group with the
same resources, selectors, tolerations and annotations share a pod set. The queue comes from
`gpucarve.io/queue` or Kueue's `kueue.x-k8s.io/queue-name` label, else from the namespace; the
priority class from `spec.priorityClassName`. Submit time is the creation time in seconds
since `epoch` (the scheduler's injected clock origin), so decisions never read a wall clock.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from fractions import Fraction
from typing import Any

from gpucarve.config.device_select import Device, devices_key
from gpucarve.config.workload_spec import build_workload
from gpucarve.core.amounts import FlavorName
from gpucarve.core.policy import Policy
from gpucarve.core.problems import Problem
from gpucarve.core.quantity import parse_quantity
from gpucarve.core.vocabulary import (
    EXPECTED_RUNTIME_ANNOTATION,
    FRACTION_ANNOTATION,
    FRACTION_LIMIT_ANNOTATION,
    GROUP_LABELS,
    HOSTNAME_LABEL,
    MEMORY_ANNOTATION,
    MEMORY_LIMIT_ANNOTATION,
    QUEUE_LABELS,
)
from gpucarve.core.workload import RunningWorkload, Workload
from gpucarve.kube.view.pods.claims import PodClaims
from gpucarve.kube.view.pods.group_spec import GroupSpec
from gpucarve.kube.view.pods.owner_kinds import group_of
from gpucarve.kube.view.pods.pod_groups import resolve_topology

__all__ = ["GROUP_LABELS", "GroupSpec", "PendingGroup", "WorkloadCache", "pending_workloads"]

KEPT_ANNOTATIONS = (
    FRACTION_ANNOTATION,
    MEMORY_ANNOTATION,
    FRACTION_LIMIT_ANNOTATION,
    MEMORY_LIMIT_ANNOTATION,
)


CACHE_LIMIT = 100_000


@dataclass
class WorkloadCache:
    """Groups already built, by the exact versions of their pods, and workloads already
    validated, by their document (a new pod version that changes nothing the workload reads,
    such as its status, is not validated again)."""

    by_pods: dict[tuple[object, ...], PendingGroup] = field(default_factory=dict)
    by_doc: dict[str, tuple[Workload | None, list[Problem]]] = field(default_factory=dict)
    running: dict[tuple[object, ...], tuple[RunningWorkload, object, object]] = field(
        default_factory=dict
    )

    def trim(self) -> None:
        for d in (self.by_pods, self.by_doc, self.running):
            if len(d) > CACHE_LIMIT:
                d.clear()


@dataclass(frozen=True)
class PendingGroup:
    workload: Workload | None
    pods: tuple[str, ...]  # namespace/name of the pods in it
    problems: tuple[Problem, ...]
    # The pods of each pod set, in pod-set order: the engine's pod `<set>-<i>` is sets[k][i].
    sets: tuple[tuple[str, ...], ...] = ()


def _group_of(pod: Mapping[str, Any]) -> str | None:
    found = group_of(pod["metadata"], spec=pod.get("spec"))
    return None if found is None else found[0]


def group_key(pod: Mapping[str, Any]) -> tuple[str, str]:
    """(namespace, group) of a pod: its pod group, or the pod itself when it has none."""
    meta = pod["metadata"]
    group = _group_of(pod)
    return meta["namespace"], group if group is not None else meta["name"]


def seconds_since(stamp: str, epoch: datetime) -> int:
    """An API timestamp as whole seconds after the scheduler's clock origin (0 if before)."""
    return max(0, seconds_from(stamp, epoch))


def seconds_from(stamp: str, epoch: datetime) -> int:
    """An API timestamp as whole seconds from the scheduler's clock origin, negative before.
    Rounded down, not toward zero: a pod created in the second before the origin and one
    created in the second after it must not share second 0 (their order breaks ties)."""
    return (datetime.fromisoformat(stamp) - epoch) // timedelta(seconds=1)


def _total(values: list[str], pick_max: bool = False) -> Fraction | None:
    try:
        parsed = [parse_quantity(v) for v in values]
    except ValueError:
        return None
    if pick_max:
        return max(parsed, default=Fraction(0))
    return sum(parsed, Fraction(0))


def _shown(total: Fraction) -> str:
    return str(total.numerator) if total.denominator == 1 else f"{math.ceil(total * 1000)}m"


def _resources(spec: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """The pod's effective requests and limits, as the kubelet and the device plugin count
    them: the sum over its containers and sidecars (init containers that keep running), or
    the largest plain init container's, whichever is more; a GPU asked for by an init
    container is held by the pod. A value that is not a quantity is passed through as
    written, so the workload check names it."""
    inits = spec.get("initContainers") or []
    sidecars = [c for c in inits if c.get("restartPolicy") == "Always"]
    plain = [c for c in inits if c.get("restartPolicy") != "Always"]
    running = [*(spec.get("containers") or []), *sidecars]
    out: dict[str, dict[str, str]] = {"requests": {}, "limits": {}}
    for kind in ("requests", "limits"):
        seen: dict[str, list[str]] = {}
        init: dict[str, list[str]] = {}
        for group, into in ((running, seen), (plain, init)):
            for c in group:
                for name, value in ((c.get("resources") or {}).get(kind) or {}).items():
                    into.setdefault(name, []).append(str(value))
        for name in sorted(set(seen) | set(init)):
            values, firsts = seen.get(name, []), init.get(name, [])
            if len(values) == 1 and not firsts:
                out[kind][name] = values[0]
                continue
            total, largest = _total(values), _total(firsts, pick_max=True)
            if total is None or largest is None:
                out[kind][name] = (values or firsts)[0]
                continue
            out[kind][name] = _shown(max(total, largest))
    return out


def _affinity(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The pod's required node affinity as the workload document says it: one term as
    `affinity`, several (ORed, as Kubernetes reads nodeSelectorTerms) as `affinityTerms`."""
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = [_expressions(term) for term in required.get("nodeSelectorTerms") or []]
    out: dict[str, Any] = {"affinity": []}
    if len(terms) == 1:
        out = {"affinity": terms[0]}
    elif terms:
        out = {"affinityTerms": terms}
    preferred = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "preferredDuringSchedulingIgnoredDuringExecution"
    ) or []
    if preferred:
        out["preferredAffinity"] = [
            {"weight": p.get("weight"), "preference": _expressions(p.get("preference") or {})}
            for p in preferred
        ]
    return out


def _expressions(term: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        {"key": e["key"], "operator": e["operator"], "values": list(e.get("values") or [])}
        for e in term.get("matchExpressions") or []
    ]


def _template(pod: Mapping[str, Any], asked: PodClaims | None) -> dict[str, Any]:
    spec = pod.get("spec") or {}
    annotations = pod["metadata"].get("annotations") or {}
    claimed = {"deviceClaims": list(asked.requests)} if asked and asked.requests else {}
    # a pod sharing an allocated claim runs where its devices are
    pinned = {HOSTNAME_LABEL: asked.node} if asked and asked.node else {}
    return {
        **claimed,
        "resources": _resources(spec),
        "annotations": {k: v for k, v in annotations.items() if k in KEPT_ANNOTATIONS},
        "nodeSelector": {**dict(spec.get("nodeSelector") or {}), **pinned},
        **_affinity(spec),
        "tolerations": [
            {k: t[k] for k in ("key", "operator", "value", "effect") if k in t}
            for t in spec.get("tolerations") or []
        ],
    }


def pending_workloads(
    pods: Sequence[Mapping[str, Any]],
    policy: Policy,
    epoch: datetime,
    specs: Mapping[tuple[str, str], GroupSpec] | None = None,
    cache: WorkloadCache | None = None,
    keyed: Callable[[Mapping[str, Any]], tuple[str, str]] = group_key,
    devices: Mapping[FlavorName, Sequence[Device]] | None = None,
    seen_devices: str | None = None,
    claims: Mapping[str, PodClaims] | None = None,
) -> list[PendingGroup]:
    """Workloads of the pending pods (in namespace/name order of their groups). A scheduler
    that builds them every cycle passes a `cache`: an unchanged group is validated once, and
    `keyed`, its memo of each pod's `group_key`. `devices`: each DRA flavor's devices as the
    cluster publishes them, for the selectors of the pods' claims; `seen_devices`, their
    fingerprint where the caller has it (the inventory keeps one). Without devices (None) the
    fingerprint is empty whatever the caller says: the workloads built do not depend on it, and
    a bound gang (grouped without devices) then finds the workload its pods had pending.
    `claims`: what each pod's ResourceClaims ask (namespace/name -> `attach_claims`'s)."""
    if devices is None:
        seen_devices = ""
    elif seen_devices is None:
        seen_devices = devices_key(devices)
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for pod in pods:
        groups.setdefault(keyed(pod), []).append(pod)
    out: list[PendingGroup] = []
    if cache is not None:
        cache.trim()
    for (namespace, name), members in sorted(groups.items()):
        members = sorted(members, key=lambda p: p["metadata"]["name"])
        group_spec = (specs or {}).get((namespace, name))
        if group_spec is not None:
            resolved = resolve_topology(group_spec, policy.topology_keys, f"{namespace}/{name}")
            if isinstance(resolved, Problem):
                pod_ids = tuple(f"{namespace}/{p['metadata']['name']}" for p in members)
                out.append(PendingGroup(None, pod_ids, (resolved,)))
                continue
            group_spec = resolved
        asked = {p["metadata"]["name"]: claimed.get(f"{namespace}/{p['metadata']['name']}")
                 for p in members} if (claimed := claims or {}) else {}  # fmt: skip
        versions = tuple(
            (
                p["metadata"]["name"],
                p["metadata"].get("resourceVersion"),
                c.versions if (c := asked.get(p["metadata"]["name"])) is not None else (),
            )
            for p in members
        )
        exact = None
        if cache is not None and all(v for _, v, _ in versions):
            exact = (namespace, name, group_spec, versions, seen_devices)
            hit = cache.by_pods.get(exact)
            if hit is not None:
                out.append(hit)
                continue
        doc, by_set = _group_doc(namespace, name, members, group_spec, epoch, asked)
        built = None
        if cache is not None:
            sig = json.dumps(doc, sort_keys=True) + seen_devices
            built = cache.by_doc.get(sig)
        if built is None:
            built = build_workload(doc, policy, (f"{namespace}/{name}",), devices)
            if cache is not None:
                cache.by_doc[sig] = built
        workload, problems = built
        pod_ids = tuple(f"{namespace}/{p['metadata']['name']}" for p in members)
        group = PendingGroup(workload, pod_ids, tuple(problems), by_set)
        if cache is not None and exact is not None:
            cache.by_pods[exact] = group
        out.append(group)
    return out


def _group_doc(
    namespace: str,
    name: str,
    members: Sequence[Mapping[str, Any]],
    group_spec: GroupSpec | None,
    epoch: datetime,
    asked: Mapping[str, PodClaims | None],
) -> tuple[dict[str, Any], tuple[tuple[str, ...], ...]]:
    """A pending group as the workload document `build_workload` reads (pods with the same
    template form one pod set), and the pods of each set."""
    first = members[0]
    labels = first["metadata"].get("labels") or {}
    sets: dict[str, dict[str, Any]] = {}
    set_pods: dict[str, list[str]] = {}
    for pod in members:
        template = _template(pod, asked.get(pod["metadata"]["name"]))
        sig = json.dumps(template, sort_keys=True)
        if sig not in sets:
            sets[sig] = {"name": f"set-{len(sets)}", "count": 0, **template}
            set_pods[sig] = []
        sets[sig]["count"] += 1
        set_pods[sig].append(f"{namespace}/{pod['metadata']['name']}")
    pod_sets = list(sets.values())
    in_group = _group_of(first) is not None
    if in_group and group_spec is not None and len(pod_sets) == 1:
        pod_sets[0]["minCount"] = min(group_spec.min_member, pod_sets[0]["count"])
    doc: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": {k: v for k, v in labels.items() if k in QUEUE_LABELS},
        "submitTime": min(
            seconds_since(p["metadata"]["creationTimestamp"], epoch) for p in members
        ),
        "podSets": pod_sets,
    }
    if priority := (first.get("spec") or {}).get("priorityClassName"):
        doc["priorityClass"] = priority
    claimed = _claimed_runtime(first)
    if claimed is not None:
        doc["expectedRuntimeSeconds"] = claimed
    if not all(_controlled(p) for p in members):
        doc["restartable"] = False
    deadline = (first.get("spec") or {}).get("activeDeadlineSeconds")
    owner = group_spec.deadline_s if group_spec is not None and in_group else None
    if owner is not None:  # the Job's own deadline bounds its pods' runtime too
        deadline = owner if not isinstance(deadline, int) else min(deadline, owner)
    if deadline is not None:
        doc["activeDeadlineSeconds"] = deadline
    if group_spec is not None and in_group:
        if group_spec.topology != "none":
            doc["topology"] = group_spec.topology
        if group_spec.timeout_s is not None:
            doc["scheduleTimeoutSeconds"] = group_spec.timeout_s
    return doc, tuple(tuple(set_pods[sig]) for sig in sets)


def _controlled(pod: Mapping[str, Any]) -> bool:
    """Whether a controller (a Job, a ReplicaSet…) owns the pod, and so makes it again once it
    is evicted."""
    refs = pod["metadata"].get("ownerReferences") or []
    return any(isinstance(r, Mapping) and r.get("controller") is True for r in refs)


def _claimed_runtime(pod: Mapping[str, Any]) -> object:
    """How long a pod says it runs: the gpucarve.io/expected-runtime annotation (seconds, or a
    number with s, m, h or d). A malformed one is passed on as it is, for validation to name."""
    raw = (pod["metadata"].get("annotations") or {}).get(EXPECTED_RUNTIME_ANNOTATION)
    if raw is None:
        return None
    seconds = _duration(raw) if isinstance(raw, str) else None
    return raw if seconds is None else seconds


_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86_400}


def _duration(text: str) -> int | None:
    number, unit = text[:-1], text[-1:]
    if unit.isdigit():
        number, unit = text, ""
    if not number.isdigit() or len(number) > 9 or unit not in _UNITS:
        return None
    return int(number) * _UNITS[unit]


def recorded_doc(
    namespace: str, name: str, members: Sequence[Mapping[str, Any]], epoch: datetime
) -> dict[str, Any]:
    """A group of pods as a recorded history keeps it: the workload document its pods would
    give the engine pending (without its owner's gang spec or its claims' devices)."""
    ordered = sorted(members, key=lambda p: p["metadata"]["name"])
    doc, _ = _group_doc(namespace, name, ordered, None, epoch, {})
    return doc
