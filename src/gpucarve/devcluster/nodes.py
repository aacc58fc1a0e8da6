"""Kubernetes Node objects for a policy's pools, as the NVIDIA stack would publish them.

Capacity and allocatable carry the device plugin's resources (`nvidia.com/gpu`,
`nvidia.com/mig-<profile>` under the mixed MIG strategy, `nvidia.com/gpu.shared` for
time-slicing and MPS with renamed resources) plus CPU, memory and pods; labels are the ones GPU
Feature Discovery sets (product, count, memory, replicas, sharing strategy, MIG strategy) and
the pool's own. A DRA pool's node publishes no GPU resource: its GPUs are in a ResourceSlice
of NVIDIA's DRA driver (`slice_manifests`), one device `gpu-<index>` per GPU with the
attributes and memory the driver gives it. Used by `gpucarve dev-cluster` and the integration
tests; kwok makes the nodes Ready.

A DRA pool with dynamic MIG is published as partitionable devices (KEP-4815): per GPU a
counter set with one counter per memory slice, and every placement of every profile the pool
may carve as a device that consumes the memory slices it covers. The driver creates a partition
when a claim for it is prepared, so the counters are what keeps two partitions off one slice.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from gpucarve.config.device_select import catalog_device, catalog_mig_device
from gpucarve.core.catalog import GpuModel
from gpucarve.core.cluster import Node, Slice, build_cluster
from gpucarve.core.policy import DeviceApi, Policy, Pool
from gpucarve.core.vocabulary import DRA_GPU_DRIVER, HOSTNAME_LABEL

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
        if pool.mig_dynamic is not None:
            out += _partitionable(pool, n)
            continue
        devices = [
            _slice_device(pool.model, cluster.slices[sid], f"GPU-{n.name}-{g.index}")
            for g in n.gpus
            for sid in g.slice_ids
            if cluster.slices[sid].replica in (None, 0)  # a shared GPU is one device
        ]
        out.append(_slice(n.name, None, 1, {"devices": devices}))
    return out


MAX_COUNTER_SETS = 8  # per ResourceSlice (resource.k8s.io/v1)


def _partitionable(pool: Pool, n: Node) -> list[dict[str, Any]]:
    """A dynamic MIG node's slices: its GPUs' counter sets (a slice holds counters or devices,
    never both), then per GPU one slice of its partitions (under the 64 devices a slice with
    counter consumption may hold)."""
    model = pool.model
    assert model.mig is not None
    geom = model.mig
    profiles = {f.profile for f in pool.flavors() if f.profile is not None}
    counters = [
        {"name": f"gpu-{g.index}-counters",
         "counters": {f"memory-slice-{k}": {"value": "1"} for k in range(geom.memory_slices)}}
        for g in n.gpus
    ]  # fmt: skip
    chunks = [counters[i : i + MAX_COUNTER_SETS] for i in range(0, len(counters), MAX_COUNTER_SETS)]
    total = len(chunks) + len(n.gpus)
    out = [
        _slice(n.name, f"counters-{i}", total, {"sharedCounters": chunk})
        for i, chunk in enumerate(chunks)
    ]
    for g in n.gpus:
        uuid = f"GPU-{n.name}-{g.index}"
        devices = []
        for prof in geom.profiles:
            if prof.name not in profiles:
                continue
            for start in prof.starts:
                d = _device(model, g.index, prof.name, start, uuid)
                d["consumesCounters"] = [{
                    "counterSet": f"gpu-{g.index}-counters",
                    "counters": {f"memory-slice-{k}": {"value": "1"}
                                 for k in range(start, start + prof.memory_slices)},
                }]  # fmt: skip
                devices.append(d)
        out.append(_slice(n.name, f"gpu-{g.index}", total, {"devices": devices}))
    return out


def _slice(node: str, part: str | None, count: int, body: dict[str, Any]) -> dict[str, Any]:
    """One of the `count` ResourceSlices of a node's resource pool (named after the node)."""
    name = f"{node}-{DRA_GPU_DRIVER}" + (f"-{part}" if part else "")
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": DRA_GPU_DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": count},
            **body,
        },
    }


def _slice_device(model: GpuModel, s: Slice, uuid: str) -> dict[str, Any]:
    out = _device(model, s.gpu, s.profile, s.start, uuid)
    if s.replica is not None:
        # shared by consumable capacity: each claim takes part of its memory
        out["allowMultipleAllocations"] = True
    return out


def _device(
    model: GpuModel, gpu: int, profile: str | None, start: int | None, uuid: str
) -> dict[str, Any]:
    if profile is None:
        d, name, ids = catalog_device(model), f"gpu-{gpu}", {"uuid": uuid}
    else:
        prof = next(p for p in (model.mig.profiles if model.mig else ()) if p.name == profile)
        d = catalog_mig_device(model, profile)
        name = f"gpu-{gpu}-mig-{prof.profile_id or 0}-{start}-{prof.memory_slices}"
        ids = {"uuid": f"MIG-{uuid}-{start}", "parentUUID": uuid}
    attributes = {k: _attribute(v) for k, v in sorted({**d.attributes, **ids}.items())}
    return {
        "name": name,
        "attributes": attributes,
        "capacity": {k: {"value": str(v)} for k, v in sorted(d.capacity.items())},
    }


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
            "labels": {**dict(node.labels), HOSTNAME_LABEL: node.name},
            "annotations": {KWOK_ANNOTATION: "fake"},
        },
        "spec": {"taints": taints},
        "status": {"capacity": dict(alloc), "allocatable": dict(alloc)},
    }
