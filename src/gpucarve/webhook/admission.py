"""What the admission webhook decides about a pod, without I/O: the changes that bring a pod
written for the default scheduler to gpucarve, and the problems that refuse one.

Only pods that ask for a GPU (an `nvidia.com/*` resource in any container, init containers
included, a gpucarve fraction annotation, or ResourceClaims where the policy has DRA pools) in
a namespace the policy governs are touched.
Validation is the scheduler's own (`kube.pods.pending_workloads` → `build_workload`): what
the webhook refuses is exactly what the scheduler would leave pending with the same message.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gpucarve.core.amounts import QuotaKey, as_flavor
from gpucarve.core.cluster import decided_labels
from gpucarve.core.cohort_tree import cohort_tree
from gpucarve.core.policy import DeviceApi, Policy
from gpucarve.core.problems import Problem, Severity
from gpucarve.core.vocabulary import DEVICE_CONFIG_ANNOTATION as DEVICE_CONFIG
from gpucarve.core.vocabulary import (
    DRA_GPU_CLASS,
    DRA_MIG_CLASS,
    MODE_LABEL,
    MUTATED_ANNOTATION,
    POOL_LABEL,
    QUEUE_LABEL,
    QUEUE_LABELS,
)
from gpucarve.core.workload import LabelRequirement, Operator, PodSet, Workload
from gpucarve.engine import Oracle
from gpucarve.kube.view.gpu_mode import implied_mode
from gpucarve.kube.view.pods.claims import PodClaims, claim_requests
from gpucarve.kube.view.pods.owners import JOB_NAME_LABELS, gang_size
from gpucarve.kube.view.pods.pods import KEPT_ANNOTATIONS, PendingGroup, pending_workloads
from gpucarve.webhook import bypass
from gpucarve.webhook.bypass import DEFAULT_SCHEDULER, DEVICE_ENV, NO_DEVICES

_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)  # submit time is irrelevant to admission


def _containers(spec: Mapping[str, Any]) -> list[tuple[str, int, Mapping[str, Any]]]:
    return bypass.containers(spec, ("initContainers", "containers"))


def _requests_device(spec: Mapping[str, Any]) -> bool:
    return any(bypass.asks_device(c) for _, _, c in _containers(spec))


def fraction_only(pod: Mapping[str, Any]) -> bool:
    """Asks for a gpucarve fraction (or GPU memory) and no device-plugin resource: its GPU
    comes through the device ConfigMap the scheduler writes."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return any(k in annotations for k in KEPT_ANNOTATIONS) and not _requests_device(
        pod.get("spec") or {}
    )


def wants_gpu(pod: Mapping[str, Any]) -> bool:
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return any(k in annotations for k in KEPT_ANNOTATIONS) or _requests_device(
        pod.get("spec") or {}
    )


def claims_dra(policy: Policy, pod: Mapping[str, Any]) -> bool:
    """Claims devices through ResourceClaims where the policy has DRA pools: gpucarve
    allocates them, so the pod is its to schedule (a claim of another device class then
    waits, saying gpucarve does not serve it)."""
    if not (pod.get("spec") or {}).get("resourceClaims"):
        return False
    return any(p.devices is DeviceApi.DRA for p in policy.pools)


def governed(policy: Policy, namespace: str) -> bool:
    return any(namespace in q.namespaces for q in policy.queues)


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


@dataclass
class Mutation:
    patch: list[dict[str, Any]] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)
    annotations: dict[str, str] = field(default_factory=dict)
    removed: list[str] = field(default_factory=list)  # annotations the patch removes


def _device_config(m: Mutation, pod: Mapping[str, Any], review_uid: str) -> None:
    """A fraction-only pod gets its GPU from a ConfigMap the scheduler writes at binding
    (`kube.device_config`): named here, from the review's uid (the pod has neither name nor
    uid yet when it is created from a generateName)."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    name = bypass.device_config_name(review_uid)
    # Only a fraction reaches its GPU this way: a pod that claims DRA devices gets them from
    # the DRA driver, one that asks the device plugin from the kubelet. One that names a
    # ConfigMap of gpucarve's shape keeps it (an earlier invocation of this admission); any
    # other name is removed (`_close_bypasses`) and replaced.
    if not fraction_only(pod) or (
        DEVICE_CONFIG in annotations and DEVICE_CONFIG not in bypass.strip_owned(pod, True)
    ):
        return
    m.annotations[DEVICE_CONFIG] = name
    for i, c in enumerate((pod.get("spec") or {}).get("containers") or []):
        ref = {"configMapRef": {"name": name}}
        if c.get("envFrom"):
            m.patch.append({"op": "add", "path": f"/spec/containers/{i}/envFrom/-", "value": ref})
        else:
            m.patch.append({"op": "add", "path": f"/spec/containers/{i}/envFrom", "value": [ref]})
    m.changes.append(f"envFrom ConfigMap {name} (the GPU chosen at binding)")


def mutate(
    policy: Policy, pod: Mapping[str, Any], scheduler_name: str, review_uid: str | None = None
) -> Mutation:
    """The JSON patch (RFC 6902) for one pod, and what it changes in words."""
    m = Mutation()
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    namespace = str(meta.get("namespace") or "")
    if not governed(policy, namespace):
        return m
    _close_bypasses(m, pod)
    if not (wants_gpu(pod) or claims_dra(policy, pod)):
        return _annotate(m, meta)
    if spec.get("schedulerName") in (None, "", DEFAULT_SCHEDULER):
        m.patch.append({"op": "add", "path": "/spec/schedulerName", "value": scheduler_name})
        m.changes.append(f"schedulerName={scheduler_name}")
    labels = meta.get("labels") or {}
    if not any(k in labels for k in QUEUE_LABELS):
        own = [q.name for q in policy.queues if namespace in q.namespaces]
        if len(own) == 1:
            if not labels:
                m.patch.append({"op": "add", "path": "/metadata/labels", "value": {}})
            path = f"/metadata/labels/{_escape(QUEUE_LABEL)}"
            m.patch.append({"op": "add", "path": path, "value": own[0]})
            m.changes.append(f"label {QUEUE_LABEL}={own[0]}")
    for kind, i, c in _containers(spec):
        res = c.get("resources") or {}
        limits, requests = res.get("limits") or {}, res.get("requests")
        missing = {n: v for n, v in limits.items()
                   if str(n).startswith("nvidia.com/") and n not in (requests or {})}  # fmt: skip
        if not missing:
            continue
        base = f"/spec/{kind}/{i}/resources"
        if requests is None:
            m.patch.append({"op": "add", "path": f"{base}/requests", "value": {}})
        for name, value in sorted(missing.items()):
            m.patch.append({"op": "add", "path": f"{base}/requests/{_escape(name)}",
                            "value": value})  # fmt: skip
            m.changes.append(f"{kind}[{c.get('name', i)}] requests {name}={value} (its limit)")
    _mode_selector(m, policy, pod)
    if review_uid:
        _device_config(m, pod, review_uid)
    return _annotate(m, meta)


def _annotate(m: Mutation, meta: Mapping[str, Any]) -> Mutation:
    """The webhook's own annotations (what it changed, in words; the device ConfigMap)."""
    if m.changes:
        m.annotations[MUTATED_ANNOTATION] = json.dumps(m.changes)
        left = set(meta.get("annotations") or {}) - set(m.removed)
        if not left:
            m.patch.append({"op": "add", "path": "/metadata/annotations", "value": {}})
        for key, value in m.annotations.items():
            path = f"/metadata/annotations/{_escape(key)}"
            m.patch.append({"op": "add", "path": path, "value": value})
    return m


def _close_bypasses(m: Mutation, pod: Mapping[str, Any]) -> None:
    """Remove a tenant's scheduler-owned annotations; give containers that get no GPU an
    explicit NVIDIA_VISIBLE_DEVICES=void (webhook/bypass.py)."""
    only = fraction_only(pod)
    for key in bypass.strip_owned(pod, only):
        m.patch.append({"op": "remove", "path": f"/metadata/annotations/{_escape(key)}"})
        m.removed.append(key)
        m.changes.append(f"removed annotation {key} (set by gpucarve only)")
    _void(m, pod, bypass.needs_void(pod, only))


def _void(m: Mutation, pod: Mapping[str, Any], where: list[tuple[str, int]]) -> None:
    spec = pod.get("spec") or {}
    for kind, i in where:
        c = spec[kind][i]
        var = {"name": DEVICE_ENV[0], "value": NO_DEVICES}
        if c.get("env"):
            m.patch.append({"op": "add", "path": f"/spec/{kind}/{i}/env/-", "value": var})
        else:
            m.patch.append({"op": "add", "path": f"/spec/{kind}/{i}/env", "value": [var]})
        name = c.get("name", i)
        m.changes.append(f"{kind}[{name}] env {DEVICE_ENV[0]}={NO_DEVICES} (it gets no GPU)")


def mutate_debug(policy: Policy, pod: Mapping[str, Any], old: Mapping[str, Any]) -> Mutation:
    """The patch for debug containers added to a running pod (`kubectl debug`): each that
    does not set it gets NVIDIA_VISIBLE_DEVICES=void, whatever its image sets."""
    m = Mutation()
    if governed(policy, str((pod.get("metadata") or {}).get("namespace") or "")):
        _void(m, pod, bypass.needs_void(pod, False, old))
    return m


def pod_problems(
    policy: Policy, pod: Mapping[str, Any], scheduler_name: str = "gpucarve", mutated: bool = True
) -> list[Problem]:
    """Why the scheduler could never run this pod, or why it would reach a GPU past its
    queue (errors only); empty for a pod gpucarve does not govern. `mutated=False`: a pod
    the mutating webhook has still to see (a Job's template), judged on the rest."""
    found = pod_review(policy, pod, scheduler_name, mutated)
    return [p for p in found if p.severity is Severity.ERROR]


def pod_review(
    policy: Policy, pod: Mapping[str, Any], scheduler_name: str = "gpucarve", mutated: bool = True
) -> list[Problem]:
    """`pod_problems`, and warnings: what only the cluster's own labels could let run (a
    selector no node of the policy carries, which a node may still be given)."""
    meta = pod.get("metadata") or {}
    if not governed(policy, str(meta.get("namespace") or "")):
        return []
    gpu, only = wants_gpu(pod) or claims_dra(policy, pod), fraction_only(pod)
    own = ((meta.get("annotations") or {}).get(DEVICE_CONFIG)) if only else None
    out = device_env_problems(pod)
    out += bypass.placement_problems(pod, scheduler_name, gpu)
    out += bypass.device_access_problems(pod)
    out += bypass.env_from_problems(pod, str(own) if own is not None else None)
    out += bypass.owned_annotation_problems(pod, only)
    if mutated:
        out += bypass.unneutralised_problems(pod, only)
    out += bypass.cdi_problems(pod)
    if not gpu:
        return out
    group = _as_scheduled(policy, pod)
    out += [p for p in group.problems if p.severity is Severity.ERROR]
    if group.workload is not None and not out:
        out += never_fit_problems(policy, pod, group.workload)
    return out


_FITS_LOCK = threading.Lock()
_FITS: dict[int, Oracle] = {}


def _oracle(policy: Policy) -> Oracle:
    """The engine on the policy's cluster with nothing running, built once per policy (the
    webhook follows the policy file)."""
    hit = _FITS.get(id(policy))
    if hit is None or hit.policy is not policy:
        _FITS.clear()
        hit = _FITS[id(policy)] = Oracle(policy)
    return hit


def warm(policy: Policy) -> None:
    """Build the engine's state on the policy's cluster now (the server does it at start and on
    each policy reload), so that no review waits for it: on a large cluster it takes seconds."""
    with _FITS_LOCK:
        _oracle(policy)


def never_fit_problems(policy: Policy, pod: Mapping[str, Any], w: Workload) -> list[Problem]:
    """What the scheduler would report as never admissible (no flavor of the queue serves
    it, or a ceiling: more than any node or the queue's reach, a selector no node matches),
    from the engine's own checks on the policy's cluster: refused at `kubectl apply` where
    certain (`certain_part`); a selector only the policy's nodes fail is a warning."""
    with _FITS_LOCK:  # the decisions run in worker threads; the engine's memos are shared
        oracle = _oracle(policy)
        reasons, severity = oracle.never_fits(certain_part(policy, w)), Severity.ERROR
        if not reasons and any(ps.node_selector or ps.affinity for ps in w.pod_sets):
            reasons, severity = oracle.never_fits(_suspect_part(policy, w)), Severity.WARNING
    meta = pod.get("metadata") or {}
    name = str(meta.get("name") or meta.get("generateName") or "pod")
    if severity is Severity.WARNING:
        return [
            Problem((name, "spec"), "may-never-fit",
                    f"{r.message.replace('can never be admitted: ', '')} ({r.stage}/"
                    f"{r.plugin}): it waits until a node carries what it selects",
                    "label a node so, or fix the selector", Severity.WARNING)
            for r in reasons[:1]
        ]  # fmt: skip
    return [
        Problem((name, "spec"), "can-never-fit", f"{r.message} ({r.stage}/{r.plugin})",
                "change what the message names: nothing that frees up would let it run")
        for r in reasons[:1]
    ]  # fmt: skip


def certain_part(policy: Policy, w: Workload) -> Workload:
    """`w` with its node selection judged only where the policy decides the answer.

    The empty cycle's nodes are the policy's, with its labels alone; the cluster's own
    (hostname, zone, whatever an administrator puts on nodes, now or later) are unknown to
    it, so a requirement on one can never make a refusal certain. A pod set whose selector
    and required affinity could hold, on the labels the policy decides, on nodes of some
    pools is narrowed to those pools (every policy node carries its pool label); one that
    could hold on none keeps its requirements on decided labels, for the engine to name."""
    domains = {pool.name: decided_labels(pool) for pool in policy.pools}
    sets = []
    for ps in w.pod_sets:
        if not (ps.node_selector or ps.affinity):
            sets.append(ps)
            continue
        could = sorted(name for name, d in domains.items() if _could_select(ps, d))
        if len(could) == len(domains):
            sets.append(dataclasses.replace(ps, node_selector=(), affinity=()))
        elif could:
            term = (LabelRequirement(POOL_LABEL, Operator.IN, tuple(could)),)
            sets.append(dataclasses.replace(ps, node_selector=(), affinity=(term,)))
        else:
            decided = set().union(*domains.values())
            sets.append(_keep(ps, decided.__contains__))
    return dataclasses.replace(w, pod_sets=tuple(sets))


def _keep(ps: PodSet, wanted: Callable[[str], bool]) -> PodSet:
    """`ps` with only the selector's and required affinity's requirements on `wanted` keys
    (a term left with none goes)."""
    terms = (tuple(r for r in term if wanted(r.key)) for term in ps.affinity)
    selector = tuple(kv for kv in ps.node_selector if wanted(kv[0]))
    return dataclasses.replace(ps, node_selector=selector, affinity=tuple(t for t in terms if t))


def _suspect_part(policy: Policy, w: Workload) -> Workload:
    """`w` with only its requirements on labels the policy decides or on names close to one
    (a typo): where the policy's nodes fail those, a warning is worth the reader's time; the
    cluster's own labels (hostname, zone) are no news."""
    decided = set().union(*(decided_labels(pool) for pool in policy.pools))

    def near(key: str) -> bool:
        return key in decided or bool(difflib.get_close_matches(key, decided, n=1, cutoff=0.8))

    return dataclasses.replace(w, pod_sets=tuple(_keep(ps, near) for ps in w.pod_sets))


def _could_select(ps: PodSet, domain: Mapping[str, frozenset[str | None]]) -> bool:
    """Whether some node whose decided labels take values in `domain` could satisfy the pod
    set's node selector and required affinity (labels outside `domain`: anything)."""

    def could(req: LabelRequirement) -> bool:
        values = domain.get(req.key)
        return values is None or any(req.matches({} if v is None else {req.key: v}) for v in values)

    if not all(could(LabelRequirement(k, Operator.IN, (v,))) for k, v in ps.node_selector):
        return False
    return not ps.affinity or any(all(could(r) for r in term) for term in ps.affinity)


def job_problems(policy: Policy, job: Mapping[str, Any]) -> list[Problem]:
    """Why a batch/v1 Job in a governed namespace could never run: a pod of its template that
    the scheduler would never run, or its gang (parallelism pods that must all complete) that
    no node set or quota could ever hold. Refused when the Job is written, once, instead of
    each pod the Job controller makes being refused (or left waiting for ever) in turn."""
    meta = job.get("metadata") or {}
    ns = str(meta.get("namespace") or "")
    if not governed(policy, ns):
        return []
    name = str(meta.get("name") or meta.get("generateName") or "job")
    template = (job.get("spec") or {}).get("template") or {}
    tmeta = template.get("metadata") or {}
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": "-", "controller": True}
    pod = {
        "metadata": {**tmeta, "name": f"{name}-0", "namespace": ns,
                     "labels": {**(tmeta.get("labels") or {}), JOB_NAME_LABELS[0]: name},
                     "ownerReferences": [owner]},
        "spec": template.get("spec") or {},
    }  # fmt: skip
    where = (name, "spec", "template")
    own = [  # (its pods get what the mutating webhook adds when they are made)
        Problem((*where, *p.path[1:]), p.code, p.message, p.fix)
        for p in pod_problems(policy, pod, mutated=False)
    ]
    size = gang_size(job)
    if own or size is None or not (wants_gpu(pod) or claims_dra(policy, pod)):
        return own
    w = _as_scheduled(policy, pod).workload
    if w is None:
        return own
    # the gang: `size` pods of the template, all at once
    sets = tuple(dataclasses.replace(ps, count=size, min_count=size) for ps in w.pod_sets)
    gang = dataclasses.replace(w, pod_sets=sets)
    return [
        Problem((name, "spec", "parallelism"), p.code,
                f"its {size} pods run all at once (completions = parallelism): {p.message}",
                p.fix, p.severity)
        for p in never_fit_problems(policy, pod, gang)
        if p.severity is Severity.ERROR
    ]  # fmt: skip


def debug_problems(policy: Policy, pod: Mapping[str, Any], old: Mapping[str, Any]) -> list[Problem]:
    """Debug containers added to a running pod are held to the same rules as the pod's own:
    no device variable of their own, not privileged, and the explicit `void` (the mutating
    webhook adds it) whatever their image or envFrom would set."""
    if not governed(policy, str((pod.get("metadata") or {}).get("namespace") or "")):
        return []
    added = _added_debug(pod, old)
    out = device_env_problems(added)
    out += bypass.device_access_problems(added)
    out += bypass.unneutralised_problems(pod, False, old)
    return out


def _added_debug(pod: Mapping[str, Any], old: Mapping[str, Any]) -> dict[str, Any]:
    """`pod` with only the ephemeral containers `old` did not have (the rest are judged)."""
    had = {c.get("name") for c in (old.get("spec") or {}).get("ephemeralContainers") or []
           if isinstance(c, Mapping)}  # fmt: skip
    new = [c for c in (pod.get("spec") or {}).get("ephemeralContainers") or []
           if isinstance(c, Mapping) and c.get("name") not in had]  # fmt: skip
    return {"metadata": pod.get("metadata") or {}, "spec": {"ephemeralContainers": new}}


def device_env_problems(pod: Mapping[str, Any]) -> list[Problem]:
    """A container that names its own devices: the NVIDIA container toolkit gives a container
    whatever `NVIDIA_VISIBLE_DEVICES` says (`all` included) unless the toolkit is set to
    refuse it, so in a governed namespace that variable is gpucarve's to set (through the
    device ConfigMap), never the pod's — in any container, ephemeral ones (added later, for
    debugging) included."""
    meta = pod.get("metadata") or {}
    name = str(meta.get("name") or meta.get("generateName") or "pod")
    spec = pod.get("spec") or {}
    out: list[Problem] = []
    for kind in ("initContainers", "containers", "ephemeralContainers"):
        for i, c in enumerate(spec.get(kind) or []):
            for var in c.get("env") or []:
                if not isinstance(var, Mapping) or var.get("name") not in DEVICE_ENV:
                    continue
                if var.get("value") == NO_DEVICES and "valueFrom" not in var:
                    continue  # no GPU at all: what the webhook itself sets
                out.append(Problem((name, "spec", kind, c.get("name", str(i)), "env",
                                    str(var["name"])), "device-env-set-by-pod",
                                   f"{var['name']} chooses the node's GPUs outside the "
                                   "scheduler (the toolkit honours it, `all` included)",
                                   "remove it: request the GPUs as resources or a gpucarve "
                                   "fraction, and the container gets the ones chosen for it")
                           )  # fmt: skip
    return out


def _as_scheduled(
    policy: Policy, pod: Mapping[str, Any], asked: PodClaims | None = None
) -> PendingGroup:
    """The pod as the scheduler will read it from the API server (with what the server
    fills in), built into its workload by the scheduler's own code; `asked`: what its
    ResourceClaims ask, as the scheduler reads them."""
    meta = pod.get("metadata") or {}
    shaped_meta = dict(meta)
    # a Job's pods have only generateName; the server appends five characters to it
    shaped_meta["name"] = meta.get("name") or f"{meta.get('generateName') or 'pod-'}xxxxx"
    shaped_meta["creationTimestamp"] = meta.get("creationTimestamp") or "2000-01-01T00:00:00Z"
    claims = {} if asked is None else {f"{meta.get('namespace')}/{shaped_meta['name']}": asked}
    shaped = {**pod, "metadata": shaped_meta}
    (group,) = pending_workloads([shaped], policy, _EPOCH, claims=claims)
    return group


def _mode_selector(m: Mutation, policy: Policy, pod: Mapping[str, Any]) -> None:
    """The seed's `gpu-mode` node selector, when the request implies one sharing mode: a
    pod then never lands on a pool of another mode, whoever binds it."""
    spec = pod.get("spec") or {}
    selector = spec.get("nodeSelector") or {}
    if MODE_LABEL in selector:
        return
    workload = _as_scheduled(policy, pod).workload
    if workload is None:
        return
    mode = implied_mode(policy, [ps.gpu for ps in workload.pod_sets])
    if mode is None:
        return
    if not selector:
        m.patch.append({"op": "add", "path": "/spec/nodeSelector", "value": {}})
    m.patch.append({"op": "add", "path": f"/spec/nodeSelector/{_escape(MODE_LABEL)}",
                    "value": mode})  # fmt: skip
    m.changes.append(f"nodeSelector {MODE_LABEL}={mode}")


def denial(problems: list[Problem]) -> str:
    """The message `kubectl apply` prints: each problem with where, what and the fix."""
    parts = [f"{p.location}: {p.message} (fix: {p.fix})" for p in problems]
    return "gpucarve: " + "; ".join(parts)


def queue_problems(policy: Policy, obj: Mapping[str, Any]) -> list[Problem]:
    """What a Queue object's schema cannot check: its cohort exists, and each quota names a
    flavor the pools provide and fits in them."""
    name = str((obj.get("metadata") or {}).get("name") or "")
    spec = obj.get("spec") or {}
    out: list[Problem] = []
    cohort = spec.get("cohort")
    cohorts = sorted(c.name for c in policy.cohorts)
    if cohort and cohort not in cohorts:
        out.append(Problem((name, "spec", "cohort"), "unknown-cohort",
                           f"cohort {cohort!r} does not exist",
                           f"use one of: {', '.join(cohorts) or '(the policy has none)'}, "
                           "or add it to the policy's cohorts"))  # fmt: skip
    return out + _quota_map_problems(policy, name, spec)


def cohort_problems(policy: Policy, obj: Mapping[str, Any]) -> list[Problem]:
    """What a Cohort object's schema cannot check: its parent is a cohort of the policy and
    its parents do not come back to it, and each quota names a flavor or GPU unit the pools
    provide, in amounts they hold."""
    name = str((obj.get("metadata") or {}).get("name") or "")
    spec = obj.get("spec") or {}
    out: list[Problem] = []
    parent = spec.get("parent")
    cohorts = sorted(c.name for c in policy.cohorts)
    if parent and parent not in cohorts:
        out.append(Problem((name, "spec", "parent"), "unknown-cohort",
                           f"parent cohort {parent!r} does not exist",
                           f"use one of: {', '.join(cohorts) or '(the policy has none)'}, "
                           "or add it to the policy's cohorts"))  # fmt: skip
    elif parent and name in (chain := cohort_tree(policy).path(str(parent))):
        loop = " → ".join([name, *chain[: chain.index(name) + 1]])
        out.append(Problem((name, "spec", "parent"), "cohort-cycle",
                           f"cohorts would sit in each other: {loop}",
                           "give it a parent outside its own subtree, or none"))  # fmt: skip
    return out + _quota_map_problems(policy, name, spec)


def _quota_map_problems(policy: Policy, name: str, spec: Mapping[str, Any]) -> list[Problem]:
    """A Queue's or Cohort's `quota`: each key a flavor or GPU unit the pools provide, in
    amounts they hold."""
    out: list[Problem] = []
    for flavor, q in sorted((spec.get("quota") or {}).items()):
        where = (name, "spec", "quota", str(flavor))
        if flavor not in policy.flavors and flavor not in policy.units:
            known = ", ".join(sorted([*policy.flavors, *policy.units]))
            out.append(Problem(where, "unknown-flavor",
                               f"no pool provides flavor {flavor!r}, nor is it a GPU unit",
                               f"use one of: {known}"))  # fmt: skip
            continue
        out += _quota_amounts(policy, where, QuotaKey(str(flavor)), q or {})
    return out


def _quota_amounts(
    policy: Policy, where: tuple[str, ...], key: QuotaKey, q: Mapping[str, Any]
) -> list[Problem]:
    """A flavor's quota in whole slices within what the pools hold; a GPU unit's in steps
    of its smallest slice, within its GPUs."""
    out: list[Problem] = []
    unit = policy.units.get(key)
    for name in ("nominal", "borrowingLimit", "lendingLimit"):
        value = q.get(name)
        at = (*where, name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
            out.append(Problem(at, "not-a-number", f"{name} {value!r} of {key} is not a number",
                               "write a number of slices (GPUs for a GPU unit)"))  # fmt: skip
            continue
        if value < 0 or value in (float("inf"), float("-inf")):
            out.append(Problem(at, "negative-quota", f"{name} {value} of {key}: a quota counts "
                               "what may be held", "write 0 or more"))  # fmt: skip
            continue
        if unit is None and value != int(value):
            out.append(Problem(at, "not-whole-slices", f"{name} {value} {key}: a flavor's "
                               "quota counts whole slices", "use a whole number"))  # fmt: skip
        elif unit is not None and abs(value * unit.parts_per_gpu - round(
                value * unit.parts_per_gpu)) > 1e-9:  # fmt: skip
            step = f"1/{unit.parts_per_gpu}"
            out.append(Problem(at, "not-whole-parts", f"{name} {value} GPUs of unit {key}: "
                               f"its slices come in steps of {step} GPU",
                               f"use a multiple of {step}"))  # fmt: skip
    nominal = q.get("nominal")
    if isinstance(nominal, int | float):
        capacity = policy.capacity.get(as_flavor(key), 0) if unit is None else unit.gpus
        what = key if unit is None else f"{key} GPUs"
        if nominal > capacity:
            out.append(Problem((*where, "nominal"), "quota-exceeds-capacity",
                               f"nominal {nominal} {what} but the pools hold {capacity}",
                               f"lower it to at most {capacity}, or add capacity"))  # fmt: skip
    return out


def pod_group_problems(policy: Policy, obj: Mapping[str, Any]) -> list[Problem]:
    """A PodGroup's queue must be one its namespace may use, and its priority class one that
    queue allows: a gang cannot claim another team's quota or priority any more than a pod."""
    meta = obj.get("metadata") or {}
    name, ns = str(meta.get("name") or ""), str(meta.get("namespace") or "")
    spec = obj.get("spec") or {}
    own = [q for q in policy.queues if ns in q.namespaces]
    if not own:
        return []  # not a governed namespace
    out: list[Problem] = []
    queue = own[0]
    if wanted := spec.get("queue"):
        allowed = [q for q in own if q.name == wanted]
        if not allowed:
            names = ", ".join(q.name for q in own)
            out.append(Problem((name, "spec", "queue"), "queue-not-for-namespace",
                               f"namespace {ns!r} may not use queue {wanted!r}",
                               f"use {names}, or leave spec.queue out"))  # fmt: skip
            return out
        queue = allowed[0]
    pc = spec.get("priorityClassName")
    if pc and queue.allowed_priority_classes and pc not in queue.allowed_priority_classes:
        out.append(Problem((name, "spec", "priorityClassName"), "priority-class-not-allowed",
                           f"queue {queue.name!r} may not use priority class {pc!r}",
                           f"use one of: {', '.join(queue.allowed_priority_classes)}"))  # fmt: skip
    return out


GPU_CLASSES = (DRA_GPU_CLASS, DRA_MIG_CLASS)


def claim_problems(policy: Policy, obj: Mapping[str, Any], template: bool) -> list[Problem]:
    """Why a ResourceClaim (or the claims a ResourceClaimTemplate makes) for GPUs in a governed
    namespace could never be allocated on the policy's cluster: a selector no device of a DRA
    pool matches, more devices than any node has, a request gpucarve cannot serve. The same
    checks the scheduler makes (a pod with that claim would wait with the same message),
    refused when the claim is written instead. Claims for other device classes (a NIC, an
    FPGA) are not gpucarve's and pass."""
    meta = obj.get("metadata") or {}
    name = str(meta.get("name") or meta.get("generateName") or "claim")
    if not governed(policy, str(meta.get("namespace") or "")):
        return []
    if not any(p.devices is DeviceApi.DRA for p in policy.pools):
        return []
    spec = (obj.get("spec") or {}).get("spec") if template else obj.get("spec")
    claim = {"spec": spec or {}}
    field = ("spec", "spec", "devices") if template else ("spec", "devices")
    requested = ((spec or {}).get("devices") or {}).get("requests") or []
    classes = {
        alt.get("deviceClassName")
        for r in requested
        for alt in [r.get("exactly") or {}, *(r.get("firstAvailable") or [])]
    }
    if not classes & set(GPU_CLASSES):
        return []
    requests, refused = claim_requests(claim)
    if refused is not None:
        return [Problem((name, *field, "requests"), "claim-unsupported", refused,
                        "ask with `exactly` for a count of devices")]  # fmt: skip
    pod = {
        "metadata": {"name": name, "namespace": meta.get("namespace")},
        "spec": {"containers": [{"name": "main"}]},
    }
    group = _as_scheduled(policy, pod, PodClaims(tuple(requests)))
    out = [
        Problem((name, *field, *_request_path(p.path)), p.code, p.message, p.fix)
        for p in group.problems
        if p.severity is Severity.ERROR
    ]
    if group.workload is not None and not out:
        out += [
            Problem((name, *field), p.code, p.message, p.fix)
            for p in never_fit_problems(policy, pod, group.workload)
        ]
    return out


def _request_path(path: tuple[str | int, ...]) -> tuple[str | int, ...]:
    """A problem's path in the workload built from a claim (`podSets.0.deviceClaims.K...`)
    as the path in the claim (`requests.K.exactly...`)."""
    if tuple(path[1:4]) == ("podSets", 0, "deviceClaims") and len(path) > 4:
        return ("requests", path[4], "exactly", *path[5:])
    return tuple(path[1:])
