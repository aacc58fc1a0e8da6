"""What must hold after any fault, read back through the API: no GPU slice assigned twice (the
`gpucarve.io/assignment` annotations), no node's allocatable exceeded, every gang bound whole or
not at all, and no pod lost (each created pod bound, or pending with the scheduler's reason).

`violations` works on the objects alone, so `bench/soak.py` reports what a long run breaks
instead of stopping at the first; the tests assert through `check_invariants`."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

from gpucarve.core.quantity import parse_quantity
from tests.integration.api import Api

GROUP_LABELS = ("gpucarve.io/pod-group", "scheduling.x-k8s.io/pod-group")
Obj = dict[str, Any]


def check_invariants(api: Api, namespace: str, created: set[str]) -> dict[str, int]:
    """Assert the invariants; returns counts (bound, pending) for the caller's own checks."""
    pods = api.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
    counts, problems = violations(pods, api.get("/api/v1/nodes")["items"], created)
    assert not problems, "\n".join(problems[:20])
    return counts


def violations(
    pod_list: Iterable[Obj], node_list: Iterable[Obj], created: set[str]
) -> tuple[dict[str, int], list[str]]:
    """(bound and pending counts, every broken invariant in words)."""
    pods = {p["metadata"]["name"]: p for p in pod_list}
    nodes = {n["metadata"]["name"]: n for n in node_list}
    problems = [f"pod {name} lost" for name in sorted(created - set(pods))]
    slices: dict[str, list[str]] = defaultdict(list)
    used: dict[str, Counter[str]] = defaultdict(Counter)
    gangs: dict[str, list[bool]] = defaultdict(list)
    bound = pending = 0
    for name, pod in sorted(pods.items()):
        node = (pod.get("spec") or {}).get("nodeName")
        labels = pod["metadata"].get("labels") or {}
        if group := next((labels[k] for k in GROUP_LABELS if labels.get(k)), None):
            gangs[group].append(node is not None)
        if not node:
            pending += 1
            conds = {c["type"]: c for c in (pod.get("status") or {}).get("conditions") or []}
            cond = conds.get("PodScheduled") or {}
            if cond.get("status") != "False" or not cond.get("message"):
                problems.append(f"pod {name} pending without the scheduler's reason: {cond}")
            continue
        bound += 1
        if node not in nodes:
            problems.append(f"pod {name} bound to {node}, which does not exist")
        problems += _bound_pod(name, pod, node, slices, used[node])
    problems += [f"slice {s} assigned to {names}" for s, names in slices.items() if len(names) > 1]
    for node, amounts in used.items():
        allocatable = (nodes.get(node) or {}).get("status", {}).get("allocatable", {})
        for resource, milli in amounts.items():
            have = int(parse_quantity(allocatable.get(resource, "0")) * 1000)
            if node in nodes and milli > have:
                problems.append(f"node {node}: {resource} {milli}m used of {have}m allocatable")
    for group, placed in gangs.items():
        if any(placed) and not all(placed):
            problems.append(f"gang {group} partly bound: {sum(placed)} of {len(placed)}")
    return {"bound": bound, "pending": pending}, problems


def _bound_pod(
    name: str, pod: Obj, node: str, slices: dict[str, list[str]], used: Counter[str]
) -> list[str]:
    """A bound pod's slices (gathered in `slices`) and requests (added to its node's `used`)."""
    annotation = (pod["metadata"].get("annotations") or {}).get("gpucarve.io/assignment")
    if annotation is None:
        return [f"pod {name} bound without gpucarve's assignment"]
    problems = []
    for sid in json.loads(annotation)["slices"]:
        if not sid.startswith(node + "/"):
            problems.append(f"pod {name} on {node} holds slice {sid}")
        slices[sid].append(name)
    for container in pod["spec"]["containers"]:
        for resource, amount in (container["resources"].get("requests") or {}).items():
            used[resource] += int(parse_quantity(amount) * 1000)
    return problems
