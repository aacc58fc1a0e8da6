"""What must hold after any fault, read back through the API: no GPU slice assigned twice (the
`gpucarve.io/assignment` annotations), no node's allocatable exceeded, every gang bound whole or
not at all, and no pod lost (each created pod bound, or pending with the scheduler's reason).
For Dynamic Resource Allocation (`claim_violations`): no device in two claims, no two MIG
partitions on one memory slice, claims on the nodes of the pods they are reserved for.

`violations` works on the objects alone, so `bench/soak.py` reports what a long run breaks
instead of stopping at the first; the tests assert through `check_invariants`."""

from __future__ import annotations

import json
import re
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


_MIG_DEVICE = re.compile(r"^gpu-(\d+)-mig-\d+-(\d+)-(\d+)$")


def check_claims(api: Api, namespaces: Iterable[str]) -> int:
    """Assert the claim invariants (`claim_violations`) over the namespaces' claims, pods and
    the cluster's ResourceSlices; returns how many claims are allocated."""
    # one list per kind, not per namespace: a device freed in one namespace after its list and
    # taken in the next before its own would read as held twice
    wanted = set(namespaces)
    claims = [
        c
        for c in api.get("/apis/resource.k8s.io/v1/resourceclaims")["items"]
        if c["metadata"]["namespace"] in wanted
    ]
    pods = [p for p in api.get("/api/v1/pods")["items"] if p["metadata"]["namespace"] in wanted]
    slices = api.get("/apis/resource.k8s.io/v1/resourceslices")["items"]  # fmt: skip
    allocated, problems = claim_violations(claims, pods, slices)
    assert not problems, "\n".join(problems[:20])
    return allocated


def claim_violations(
    claims: Iterable[Obj], pods: Iterable[Obj], slices: Iterable[Obj]
) -> tuple[int, list[str]]:
    """What Dynamic Resource Allocation must keep, read back from the objects: every allocated
    device is one a ResourceSlice publishes; no device is in two claims unless it allows
    multiple allocations; MIG partitions of one GPU never share a memory slice (the counters
    they consume); each pod a claim is reserved for runs on the node the claim's devices are
    on; and a bound pod's claims are allocated and reserved for it."""
    published = {(s["spec"]["pool"]["name"], d["name"]): d for s in slices
                 for d in s["spec"].get("devices") or []}  # fmt: skip
    by_pod = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in pods}
    holders: dict[tuple[str, str], list[str]] = defaultdict(list)
    memory: dict[tuple[str, str], dict[int, str]] = defaultdict(dict)
    problems: list[str] = []
    allocated = 0
    for c in claims:
        key = f"{c['metadata']['namespace']}/{c['metadata']['name']}"
        status = c.get("status") or {}
        results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
        if not results:
            continue
        allocated += 1
        nodes = set()
        for r in results:
            at = (r["pool"], r["device"])
            nodes.add(r["pool"])
            device = published.get(at)
            if device is None:
                problems.append(f"claim {key} holds {at}, which no ResourceSlice publishes")
            elif not device.get("allowMultipleAllocations"):
                holders[at].append(key)
            if (m := _MIG_DEVICE.match(r["device"])) is not None:
                gpu, start, size = (int(g) for g in m.groups())
                for k in range(start, start + size):
                    other = memory[(r["pool"], f"gpu{gpu}")].setdefault(k, key)
                    if other != key:
                        problems.append(f"claims {other} and {key} share memory slice {k} of "
                                        f"{r['pool']}/gpu{gpu}")  # fmt: skip
        for ref in status.get("reservedFor") or []:
            pod = by_pod.get((c["metadata"]["namespace"], ref.get("name")))
            node = ((pod or {}).get("spec") or {}).get("nodeName")
            if node is not None and {node} != nodes:
                problems.append(f"claim {key} on {sorted(nodes)} reserved for pod "
                                f"{ref.get('name')} on {node}")  # fmt: skip
    problems += [
        f"device {at} allocated to {keys}" for at, keys in holders.items() if len(keys) > 1
    ]
    problems += _bound_pods_claims(by_pod, claims)
    return allocated, problems


def _bound_pods_claims(pods: dict[tuple[str, str], Obj], claims: Iterable[Obj]) -> list[str]:
    """A bound pod whose claims exist must find each allocated and reserved for it."""
    found = {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in claims}
    problems = []
    for (ns, name), pod in pods.items():
        spec = pod.get("spec") or {}
        if not spec.get("nodeName") or spec.get("schedulerName") != "gpucarve":
            continue
        made = {s["name"]: s.get("resourceClaimName")
                for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []}  # fmt: skip
        for ref in spec.get("resourceClaims") or []:
            claim_name = ref.get("resourceClaimName") or made.get(ref["name"])
            claim = found.get((ns, claim_name or ""))
            if claim is None:
                continue  # deleted with its pod, or made by another controller
            reserved = [r.get("name") for r in (claim.get("status") or {}).get("reservedFor") or []]
            if name not in reserved:
                problems.append(f"pod {ns}/{name} bound without its claim {claim_name} reserved")
    return problems


def bound_at_once(seen: list[tuple[float, int]], total: int, within_s: float = 1.0) -> str | None:
    """Why `seen`, polls of a gang as (monotonic time, pods bound), is not a gang bound at
    once; None if it is. The count never falls, and from the first poll that saw a pod bound
    to the first that saw all `total`, at most `within_s` pass: a poll may land in the moments
    between the binding calls of the one cycle that placed the gang (a binding is one API call
    per pod, made in parallel), but a part that stays bound alone is a gang bound in part."""
    counts = [n for _, n in seen]
    if counts != sorted(counts):
        return f"the bound count fell: {counts}"
    first = next((t for t, n in seen if n), None)
    whole = next((t for t, n in seen if n == total), None)
    if first is None or whole is None:
        return f"never bound whole: {counts}"
    if whole - first > within_s:
        return f"bound in part for {whole - first:.2f} s: {counts}"
    return None
