"""`gpucarve explain NAMESPACE/POD` on a cluster: the objects the scheduler reads (nodes, pods,
PodGroups of both kinds, Jobs), read once; the same view and engine cycle the scheduler runs
(read only: nothing is written); and the explanation of the pod's workload
(`engine.explain`), with what the pod itself says (its condition, its gang's pods).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpucarve.core.policy import DeviceApi, Policy
from gpucarve.core.vocabulary import GPU_SHARE_ANNOTATION, TERMINAL_PHASES
from gpucarve.engine import run_whole_cycle
from gpucarve.engine.explain import Explanation, explain, render
from gpucarve.kube.api.client import ApiError, Client
from gpucarve.kube.scheduler.claim_writer import RESOURCE
from gpucarve.kube.scheduler.held_idle import marked_idle, under_rules
from gpucarve.kube.scheduler.queue_status import usage_as_kept
from gpucarve.kube.view.cluster_view import View, build_view, key
from gpucarve.kube.view.nodes.devices import read_slices
from gpucarve.kube.view.nodes.inventory import build_inventory
from gpucarve.kube.view.pods.owner_kinds import OWNER_KINDS, all_specs, watched
from gpucarve.kube.view.pods.pod_facts import gpu_requests
from gpucarve.kube.view.pods.pods import group_key


class NoSuchPod(Exception):
    pass


@dataclass(frozen=True)
class PodExplanation:
    pod: str
    lines: tuple[str, ...]
    explanation: Explanation | None


def _items(client: Client, path: str, optional: bool = False) -> list[dict[str, Any]]:
    try:
        return list(client.get(path).get("items") or [])
    except ApiError as err:
        if optional and err.status in (403, 404):
            return []  # that kind of PodGroup is not installed (or not ours to read)
        raise


def read_view(
    client: Client, policy: Policy, scheduler: str, now: datetime
) -> tuple[View, datetime]:
    """The scheduler's view of the cluster now, and the origin its times count from (the
    oldest pod's creation, so the engine orders pending work as the scheduler does and judges
    running work by when it was submitted)."""
    nodes = _items(client, "/api/v1/nodes")
    pods = _items(client, "/api/v1/pods")
    specs = all_specs(
        {name: _items(client, w.path, optional=True) for name, w in watched(OWNER_KINDS)}
    )
    # the oldest pod's creation: no pod's submission is clamped to the origin, so pending
    # work keeps its order and running work its submission order (what a queue's borrowed
    # part of idle work is judged by, engine.held_idle)
    stamps = [
        datetime.fromisoformat(p["metadata"]["creationTimestamp"])
        for p in pods
        if p["metadata"].get("creationTimestamp")
    ]
    epoch = min([*stamps, now])
    # DRA pools: their GPUs in ResourceSlices, what pods' ResourceClaims ask and hold
    dra = any(p.devices is DeviceApi.DRA for p in policy.pools)
    slices = _items(client, f"{RESOURCE}/resourceslices", optional=True) if dra else []
    claims = _items(client, f"{RESOURCE}/resourceclaims", optional=True) if dra else []
    inventory = build_inventory(policy, nodes, read_slices(slices) if dra else None)
    now_s = int((now - epoch).total_seconds())
    view = build_view(policy, inventory, pods, scheduler, epoch, specs, now=now_s, claims=claims)
    # since when the scheduler saw work of a queue with an idleness rule go idle (its marks)
    mine = under_rules(policy, view.snapshot)
    if mine:
        by_key = {key(p): p for p in pods}
        marked = marked_idle({w: view.running_pods.get(w, ()) for w in mine}, by_key.get, epoch)
        view = dataclasses.replace(
            view, snapshot=dataclasses.replace(view.snapshot, idle_since=marked)
        )
    return view, epoch


def _workload_of(view: View, pod: str) -> str | None:
    for wid, sets in view.pending_sets.items():
        if any(pod in members for members in sets):
            return wid
    for wid, members in view.running_pods.items():
        if pod in members:
            return wid
    return None


def explain_pod(
    client: Client, policy: Policy, pod: str, scheduler: str, now: datetime
) -> PodExplanation:
    ns, _, name = pod.partition("/")
    try:
        obj = client.get(f"/api/v1/namespaces/{ns}/pods/{name}")
    except ApiError as err:
        if err.status == 404:
            raise NoSuchPod(pod) from None
        raise
    view, epoch = read_view(client, policy, scheduler, now)
    lines = [_pod_line(obj, scheduler)]
    if (cond := _condition(obj)) is not None:
        lines.append(f"  its condition (from the scheduler): {cond}")
    if (share := share_line(obj)) is not None:
        lines.append(f"  {share}")
    pod_key = key(obj)
    if pod_key in view.invalid:
        lines.append(f"cannot be scheduled as it is: {view.invalid[pod_key]}")
        return PodExplanation(pod_key, tuple(lines), None)
    if pod_key in view.orphans:
        lines.append(f"runs outside the policy: {view.orphans[pod_key]}")
        return PodExplanation(pod_key, tuple(lines), None)
    workload = _workload_of(view, pod_key)
    if workload is None:
        lines.append(not_ours(obj, policy, scheduler))
        return PodExplanation(pod_key, tuple(lines), None)
    now_s = max(0, int((now - epoch).total_seconds()))
    # the turns the scheduler gives: what the queues borrowed recently, as their statuses keep it
    snapshot = dataclasses.replace(view.snapshot, usage=usage_as_kept(client, policy, epoch))
    result = run_whole_cycle(snapshot, now_s)
    e = explain(snapshot, result, workload)
    lines += _gang_lines(view, obj, workload)
    lines += render(e) if e is not None else []
    return PodExplanation(pod_key, tuple(lines), e)


def not_ours(obj: Mapping[str, Any], policy: Policy, scheduler: str) -> str:
    """Why a pod is no workload this scheduler decides on, most telling first: another
    scheduler's, finished, of a namespace no queue lists, or asking for no GPU."""
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    phase = (obj.get("status") or {}).get("phase")
    asks = bool(gpu_requests(obj)) or bool(spec.get("resourceClaims"))
    if (spec.get("schedulerName") or "default-scheduler") != scheduler:
        return f"not a workload of this scheduler: spec.schedulerName is not {scheduler}" + (
            "" if not asks else f"; fix: set schedulerName: {scheduler} for gpucarve to place it"
        )
    if phase in TERMINAL_PHASES:
        return f"not a workload any more: it has {phase.lower()}"
    ns = meta.get("namespace")
    if ns not in policy.governed_namespaces():
        return f"not a workload of this scheduler: namespace {ns} is in no queue of the policy" + (
            f"; fix: add {ns} to a queue's namespaces" if asks else ""
        )
    if not asks:
        return "not a workload of this scheduler: it asks for no GPU (no nvidia.com/* limit)"
    return "not a workload of this scheduler this cycle (it may be bound already)"


def _pod_line(obj: Mapping[str, Any], scheduler: str) -> str:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    who = spec.get("schedulerName") or "default-scheduler"
    where = f"on {spec['nodeName']}" if spec.get("nodeName") else "not bound"
    mine = "" if who == scheduler else f" (its scheduler is {who}, not {scheduler})"
    return f"pod {key(obj)}: {status.get('phase', 'Pending')}, {where}{mine}"


def share_line(obj: Mapping[str, Any]) -> str | None:
    """A bursting fraction's share of its GPU now, as the scheduler wrote it on the pod."""
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(GPU_SHARE_ANNOTATION)
    if not raw:
        return None
    try:
        doc = json.loads(raw)
        parts = []
        if f := doc.get("fraction"):
            parts.append(
                f"{f['now'] / 1000:g} GPU now (request {f['request'] / 1000:g}, "
                f"limit {f['limit'] / 1000:g})"
            )
        if m := doc.get("memoryMiB"):
            parts.append(f"{m['now']} MiB now (request {m['request']}, limit {m['limit']})")
        return f"its share of {doc['gpu']} (its neighbours' requests leave it): " + "; ".join(parts)
    except (ValueError, KeyError, TypeError):
        return f"its {GPU_SHARE_ANNOTATION} annotation is unreadable: {str(raw)[:80]!r}"


def _condition(obj: Mapping[str, Any]) -> str | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            return str(c.get("message") or c.get("reason") or "")
    return None


def _gang_lines(view: View, obj: Mapping[str, Any], workload: str) -> list[str]:
    ns, group = group_key(obj)
    running = view.running_pods.get(workload.removesuffix("+rest"), ())
    waiting = [p for members in view.pending_sets.get(workload, ()) for p in members]
    if len(running) + len(waiting) <= 1:
        return []
    return [f"gang {ns}/{group}: {len(running)} pods bound, {len(waiting)} waiting"]
