"""Kubernetes Node objects for a policy's pools, as the NVIDIA stack would publish them.

Capacity and allocatable carry the device plugin's resources (`nvidia.com/gpu`,
`nvidia.com/mig-<profile>` under the mixed MIG strategy, `nvidia.com/gpu.shared` for
time-slicing and MPS with renamed resources) plus CPU, memory and pods; labels are the ones GPU
Feature Discovery sets (product, count, memory, replicas, sharing strategy, MIG strategy) and
the pool's own. A DRA pool's node publishes no GPU resource: its GPUs are in a ResourceSlice
of NVIDIA's DRA driver (`slice_manifests`), one device `gpu-<index>` per GPU with the
attributes and memory the driver gives it. Used by `gpucarve dev-cluster` and the integration
tests; kwok makes the nodes Ready.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from gpucarve.config.device_select import catalog_device, catalog_mig_device
from gpucarve.core.catalog import GpuModel
from gpucarve.core.cluster import Node, Slice, build_cluster
from gpucarve.core.policy import DeviceApi, Policy
from gpucarve.core.vocabulary import DRA_GPU_DRIVER

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
MAX_PODS = 110


def node_manifests(policy: Policy) -> list[dict[str, Any]]:
    """One Node per node of the policy's pools, in name order."""
    cluster = build_cluster(policy)
    per_node: dict[str, Counter[str]] = {}
    for s in cluster.slices.values():
        flavor = policy.flavors[s.flavor]
        if not flavor.dra:
            per_node.setdefault(s.node, Counter())[flavor.resource_name] += 1
    return [_manifest(n, per_node.get(n.name, Counter())) for n in cluster.nodes]


def slice_manifests(policy: Policy) -> list[dict[str, Any]]:
    """One ResourceSlice per node of the policy's DRA pools, as NVIDIA's DRA driver
    publishes it (a resource pool named after the node): `gpu-<index>` per whole GPU (one that
    time-slicing or MPS shares allows multiple allocations, each consuming part of its
    memory), and per MIG instance of the layout `gpu-<index>-mig-<profile id>-<start>-<size>`."""
    cluster = build_cluster(policy)
    pools = {p.name: p for p in policy.pools}
    out = []
    for n in cluster.nodes:
        pool = pools[n.pool]
        if pool.devices is not DeviceApi.DRA:
            continue
        devices = [
            _device(pool.model, cluster.slices[sid], f"GPU-{n.name}-{g.index}")
            for g in n.gpus
            for sid in g.slice_ids
            if cluster.slices[sid].replica in (None, 0)  # a shared GPU is one device
        ]
        out.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{n.name}-{DRA_GPU_DRIVER}"},
                "spec": {
                    "driver": DRA_GPU_DRIVER,
                    "nodeName": n.name,
                    "pool": {"name": n.name, "generation": 1, "resourceSliceCount": 1},
                    "devices": devices,
                },
            }
        )
    return out


def _device(model: GpuModel, s: Slice, uuid: str) -> dict[str, Any]:
    if s.profile is None:
        d, name, ids = catalog_device(model), f"gpu-{s.gpu}", {"uuid": uuid}
    else:
        prof = next(p for p in (model.mig.profiles if model.mig else ()) if p.name == s.profile)
        d = catalog_mig_device(model, s.profile)
        name = f"gpu-{s.gpu}-mig-{prof.profile_id or 0}-{s.start}-{prof.memory_slices}"
        ids = {"uuid": f"MIG-{uuid}-{s.start}", "parentUUID": uuid}
    attributes = {k: _attribute(v) for k, v in sorted({**d.attributes, **ids}.items())}
    out: dict[str, Any] = {
        "name": name,
        "attributes": attributes,
        "capacity": {k: {"value": str(v)} for k, v in sorted(d.capacity.items())},
    }
    if s.replica is not None:
        # shared by consumable capacity: each claim takes part of its memory
        out["allowMultipleAllocations"] = True
    return out


def _attribute(value: str | int | bool) -> dict[str, str | int | bool]:
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    return {"string": value}


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
