"""What must hold after any fault, read back through the API: no GPU slice assigned twice (the
`gpucarve.io/assignment` annotations), no node's allocatable exceeded, every gang bound whole or
not at all, and no pod lost (each created pod bound, or pending with the scheduler's reason)."""

from __future__ import annotations

import json
from collections import Counter, defaultdict

from gpucarve.core.quantity import parse_quantity
from tests.integration.api import Api
from tests.integration.kube_pods import node_of

GROUP_LABELS = ("gpucarve.io/pod-group", "scheduling.x-k8s.io/pod-group")


def check_invariants(api: Api, namespace: str, created: set[str]) -> dict[str, int]:
    """Assert the invariants; returns counts (bound, pending) for the caller's own checks."""
    pods = {
        p["metadata"]["name"]: p for p in api.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
    }
    lost = created - set(pods)
    assert not lost, f"pods lost: {sorted(lost)[:10]}"
    nodes = {n["metadata"]["name"]: n for n in api.get("/api/v1/nodes")["items"]}
    slices: Counter[str] = Counter()
    used: dict[str, Counter[str]] = defaultdict(Counter)
    gangs: dict[str, list[bool]] = defaultdict(list)
    bound = pending = 0
    for name, pod in pods.items():
        node = node_of(pod)
        labels = pod["metadata"].get("labels") or {}
        if group := next((labels[k] for k in GROUP_LABELS if labels.get(k)), None):
            gangs[group].append(node is not None)
        if node is None:
            pending += 1
            conds = {c["type"]: c for c in (pod.get("status") or {}).get("conditions") or []}
            cond = conds.get("PodScheduled") or {}
            assert cond.get("status") == "False" and cond.get("message"), (
                f"pod {name} pending without the scheduler's reason: {cond}"
            )
            continue
        bound += 1
        assert node in nodes, f"pod {name} bound to {node}, which does not exist"
        assignment = json.loads(pod["metadata"]["annotations"]["gpucarve.io/assignment"])
        for sid in assignment["slices"]:
            assert sid.startswith(node + "/"), f"pod {name} on {node} holds slice {sid}"
            slices[sid] += 1
        for container in pod["spec"]["containers"]:
            for resource, amount in (container["resources"].get("requests") or {}).items():
                used[node][resource] += int(parse_quantity(amount) * 1000)
    twice = [s for s, n in slices.items() if n > 1]
    assert not twice, f"slices assigned twice: {twice[:10]}"
    for node, amounts in used.items():
        allocatable = nodes[node]["status"]["allocatable"]
        for resource, milli in amounts.items():
            have = int(parse_quantity(allocatable.get(resource, "0")) * 1000)
            assert milli <= have, f"node {node}: {resource} {milli}m used of {have}m allocatable"
    for group, placed in gangs.items():
        assert all(placed) or not any(placed), f"gang {group} partly bound: {placed}"
    return {"bound": bound, "pending": pending}
