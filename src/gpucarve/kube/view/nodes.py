"""Kubernetes Node objects for a policy's pools, as the NVIDIA stack would publish them.

Capacity and allocatable carry the device plugin's resources (`nvidia.com/gpu`,
`nvidia.com/mig-<profile>` under the mixed MIG strategy, `nvidia.com/gpu.shared` for
time-slicing and MPS with renamed resources) plus CPU, memory and pods; labels are the ones GPU
Feature Discovery sets (product, count, memory, replicas, sharing strategy, MIG strategy) and
the pool's own. Used by `gpucarve dev-cluster` and the integration tests; kwok makes them Ready.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from gpucarve.core.cluster import Node, build_cluster
from gpucarve.core.policy import Policy

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
MAX_PODS = 110


def node_manifests(policy: Policy) -> list[dict[str, Any]]:
    """One Node per node of the policy's pools, in name order."""
    cluster = build_cluster(policy)
    per_node: dict[str, Counter[str]] = {}
    for s in cluster.slices.values():
        per_node.setdefault(s.node, Counter())[policy.flavors[s.flavor].resource_name] += 1
    return [_manifest(n, per_node.get(n.name, Counter())) for n in cluster.nodes]


def _manifest(node: Node, resources: Counter[str]) -> dict[str, Any]:
    alloc: dict[str, str] = {"pods": str(MAX_PODS)}
    if node.cpu_milli is not None:
        alloc["cpu"] = f"{node.cpu_milli}m"
    if node.memory_mib is not None:
        alloc["memory"] = f"{node.memory_mib}Mi"
    for name, count in sorted(resources.items()):
        alloc[name] = str(count)
    taints = []
    for t in node.taints:
        taint = {"key": t.key, "effect": t.effect}
        if t.value:
            taint["value"] = t.value
        taints.append(taint)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node.name,
            "labels": {**dict(node.labels), "kubernetes.io/hostname": node.name},
            "annotations": {KWOK_ANNOTATION: "fake"},
        },
        "spec": {"taints": taints},
        "status": {"capacity": dict(alloc), "allocatable": dict(alloc)},
    }
