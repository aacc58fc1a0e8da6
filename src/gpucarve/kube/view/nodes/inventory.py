"""The cluster the engine sees, built from the API server's Node objects.

A node belongs to the pool its `gpucarve.io/pool` label names, else to the pool whose
`nodeLabels` it carries. Its GPUs are what the pool says; the node must agree: the GPU Feature
Discovery product label must be the pool's model, and allocatable must carry exactly the
device-plugin resources the pool's sharing mode publishes (a MIG layout other than the policy's
shows up as other `nvidia.com/mig-*` counts). A node that disagrees is reported and kept out of
new placements (tainted `gpucarve.io/mismatch`), but the pods already on it still count. A
cordoned or NotReady node is kept the same way, so its running pods keep their slices.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from gpucarve.config.device_select import Device, devices_key
from gpucarve.core.amounts import FlavorName
from gpucarve.core.cluster import (
    PRODUCT_LABEL,
    UNAVAILABLE_TAINTS,
    ClusterState,
    Node,
    Slice,
    check_layouts,
    gfd_expectations,
    pool_node,
)
from gpucarve.core.gpu_faults import Fault, out_of_service
from gpucarve.core.policy import DeviceApi, Policy, Pool, SharingMode, Taint
from gpucarve.core.quantity import QuantityError, parse_quantity
from gpucarve.core.vocabulary import MIG_CHANGE_ANNOTATION as CHANGE_ANNOTATION
from gpucarve.core.vocabulary import MIG_LAYOUT_ANNOTATION as LAYOUT_ANNOTATION
from gpucarve.core.vocabulary import POD_DEVICES_ANNOTATION as POD_DEVICES
from gpucarve.core.vocabulary import POOL_LABEL, UNHEALTHY_ANNOTATION
from gpucarve.kube.view.nodes.device_truth import fault_entries, pod_devices
from gpucarve.kube.view.nodes.devices import DraDevices, device_unit, dra_problems
from gpucarve.kube.view.nodes.mig_layout import Change, NodeLayout, node_change, node_layout

UNSCHEDULABLE_TAINT, NOT_READY_TAINT, MISMATCH_TAINT = (
    Taint(key, "", "NoSchedule") for key in UNAVAILABLE_TAINTS
)
GPU_PREFIX = "nvidia.com/"


@dataclass(frozen=True)
class NodeProblem:
    node: str
    message: str

    def __str__(self) -> str:
        return f"node {self.node}: {self.message}"


@dataclass(frozen=True)
class Inventory:
    cluster: ClusterState
    problems: tuple[NodeProblem, ...]
    # The device-plugin resource of each flavor, for pods bound without gpucarve's annotation.
    resource_of: Mapping[FlavorName, str]
    # Dynamic MIG: each node's layout (by node), the changes in flight (by node), and when
    # each GPU (`node/gpuN`) last changed (RFC 3339).
    layouts: Mapping[str, NodeLayout] = field(default_factory=dict)
    changes: Mapping[str, Change] = field(default_factory=dict)
    mig_changed_at: Mapping[str, str] = field(default_factory=dict)
    # GPUs the node's health agent has taken out of service: `node/gpuN` -> why
    unhealthy: Mapping[str, str] = field(default_factory=dict)
    # The devices the kubelet gave each pod, as the node agent reports them (device_truth):
    # pod (namespace/name) -> (node, device units)
    reported: Mapping[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)
    # Dynamic Resource Allocation: the driver's GPUs per node, and each DRA flavor's devices
    # as its pools' nodes publish them (what claims' selectors are judged on)
    dra: DraDevices = field(default_factory=DraDevices)
    dra_devices: Mapping[FlavorName, tuple[Device, ...]] = field(default_factory=dict)
    dra_key: str = ""  # a fingerprint of dra_devices, for the caches of validated workloads
    # the agents' faults the scheduler took out of service within each pool's budget, and
    # those past it (left in service, reported): `node/gpuN` -> the fault
    out_of_service: Mapping[str, Fault] = field(default_factory=dict)
    held_in_service: Mapping[str, Fault] = field(default_factory=dict)


def pool_of(node: Mapping[str, Any], policy: Policy) -> Pool | str | None:
    labels = node["metadata"].get("labels") or {}
    named = labels.get(POOL_LABEL)
    if named is not None:
        for pool in policy.pools:
            if pool.name == named:
                return pool
        return f"label {POOL_LABEL}={named} names no pool of the policy"
    for pool in policy.pools:
        if pool.node_labels and all(labels.get(k) == v for k, v in pool.node_labels):
            return pool
    return None


def expected_resources(policy: Policy, pool: Pool) -> Counter[str]:
    """Device-plugin resources one node of `pool` publishes (none on a DRA pool's node)."""
    if pool.devices is DeviceApi.DRA:
        return Counter()
    _, node_slices = pool_node(policy, pool, "x", 0)
    return Counter(policy.flavors[s.flavor].resource_name for s in node_slices)


def _quantity(value: Any, scale: int) -> int | None:
    try:
        return int(parse_quantity(str(value)) * scale)
    except QuantityError:
        return None


def _ready(node: Mapping[str, Any]) -> bool:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def _renaming(pool: Pool, seen: Mapping[str, int | None], expected: Counter[str]) -> str | None:
    """A time-slicing or MPS node whose replicas come under the other name than the pool's
    (the device plugin's `renameByDefault`): the one fix that makes them agree."""
    if pool.sharing not in (SharingMode.TIME_SLICING, SharingMode.MPS):
        return None
    plain, shared = "nvidia.com/gpu", "nvidia.com/gpu.shared"
    have, want = (plain, shared) if pool.renamed else (shared, plain)
    count = expected.get(want, 0)
    if not count or seen.get(have) != count or seen.get(want):
        return None
    return (
        f"allocatable {have} is {count} where pool {pool.name} expects {want}: the device "
        f"plugin runs renameByDefault: {str(not pool.renamed).lower()}; set "
        f"`renameByDefault: {str(not pool.renamed).lower()}` on the pool (or render the "
        "device plugin's configuration from the policy: gpucarve render device-plugin)"
    )


def _mismatches(
    node: Mapping[str, Any], pool: Pool, expected: Counter[str], allocatable: Mapping[str, Any]
) -> list[str]:
    out: list[str] = []
    labels = node["metadata"].get("labels") or {}
    product = labels.get(PRODUCT_LABEL)
    names, said = gfd_expectations(pool)
    if product is not None and product not in names:
        out.append(
            f"{PRODUCT_LABEL}={product} but pool {pool.name} is {names[0]}; move the node to "
            f"a pool of that model or fix the pool's gpuModel"
        )
    for label, value in said.items():
        have = labels.get(label)
        if have is not None and str(have) != value:
            out.append(
                f"GPU Feature Discovery says {label}={have}, pool {pool.name} expects {value}; "
                f"fix the pool or move the node"
            )
    strategy = labels.get("nvidia.com/mig.strategy")
    if pool.sharing is SharingMode.MIG and strategy in ("single", "mixed"):
        strategy_want = "single" if pool.mig_single else "mixed"
        if strategy != strategy_want:
            out.append(
                f"the node runs the {strategy} MIG strategy, pool {pool.name} the "
                f"{strategy_want} one; set `mig: {{strategy: {strategy}}}` on the pool or the "
                f"device plugin's migStrategy to {strategy_want} (gpucarve render device-plugin)"
            )
    seen = {k: _quantity(v, 1) for k, v in allocatable.items() if str(k).startswith(GPU_PREFIX)}
    renaming = _renaming(pool, seen, expected)
    if renaming is not None:
        return [*out, renaming]
    for name in sorted(set(seen) | set(expected)):
        have, want = seen.get(name) or 0, expected.get(name, 0)
        if have != want:
            out.append(
                f"allocatable {name} is {have}, pool {pool.name} expects {want} "
                f"({pool.sharing} layout of the policy); fix the node's device plugin or "
                f"MIG configuration, or the pool"
            )
    return out


def node_key(node: Mapping[str, Any]) -> str:
    """What of a Node the inventory depends on: heartbeats that change nothing else keep it."""
    meta, spec, status = node["metadata"], node.get("spec") or {}, node.get("status") or {}
    annotations = meta.get("annotations") or {}
    return json.dumps(
        [
            meta["name"],
            meta.get("labels") or {},
            [
                annotations.get(LAYOUT_ANNOTATION),
                annotations.get(CHANGE_ANNOTATION),
                annotations.get(UNHEALTHY_ANNOTATION),
                annotations.get(POD_DEVICES),
            ],
            spec.get("taints") or [],
            bool(spec.get("unschedulable")),
            status.get("allocatable") or {},
            _ready(node),
        ],
        sort_keys=True,
    )


def _order(policy: Policy, found: Pool | str | None, node: Mapping[str, Any]) -> tuple[object, ...]:
    """Nodes in the order `plan` and `simulate` build them: by pool as the policy lists them,
    then by name with numbers compared as numbers (h100-2 before h100-10). A node's position
    in its pool places it in a rack, and ties between equal nodes go to the first, so both
    paths must count alike."""
    name = str(node["metadata"]["name"])
    rank = next((i for i, p in enumerate(policy.pools) if p is found), len(policy.pools))
    parts = tuple((int(p), "") if p.isdigit() else (-1, p) for p in re.split(r"(\d+)", name))
    return (rank, parts, name)


def _out_of_service(
    policy: Policy, nodes: Sequence[Mapping[str, Any]], pools: Mapping[int, Pool | str | None]
) -> tuple[dict[str, Fault], dict[str, Fault]]:
    faults: dict[str, Fault] = {}
    pool_of_gpu: dict[str, str] = {}
    pool_gpus: Counter[str] = Counter()
    for node in nodes:
        pool = pools[id(node)]
        if not isinstance(pool, Pool):
            continue
        name = node["metadata"]["name"]
        pool_gpus[pool.name] += pool.gpus_per_node
        for g, e in fault_entries(node).items():
            gpu = f"{name}/gpu{g}"
            faults[gpu] = Fault(gpu, e.reason, e.fault_class, e.since, e.reset)
            pool_of_gpu[gpu] = pool.name
    if not faults:
        return {}, {}
    health = policy.gpu_health
    return out_of_service(faults, pool_of_gpu, pool_gpus, health.by_name(), health.budget)


def build_inventory(
    policy: Policy, nodes: Sequence[Mapping[str, Any]], dra: DraDevices | None = None
) -> Inventory:
    """`dra`: the GPUs NVIDIA's DRA driver publishes (ResourceSlices), for DRA pools."""
    dra = dra if dra is not None else DraDevices()
    expected = {p.name: expected_resources(policy, p) for p in policy.pools}
    for pool in policy.pools:
        check_layouts(pool)
    mig = _Mig()
    built: list[Node] = []
    slices: dict[str, Slice] = {}
    problems: list[NodeProblem] = []
    index: Counter[str] = Counter()
    flavor_devices: dict[FlavorName, dict[str, Device]] = {}
    pools = {id(n): pool_of(n, policy) for n in nodes}
    for node in sorted(nodes, key=lambda n: _order(policy, pools[id(n)], n)):
        name = node["metadata"]["name"]
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        found = pools[id(node)]
        if not isinstance(found, Pool):
            gpus = sorted(k for k in allocatable if str(k).startswith(GPU_PREFIX))
            if isinstance(found, str) or gpus:
                why = found if isinstance(found, str) else f"publishes {', '.join(gpus)}"
                problems.append(
                    NodeProblem(
                        name,
                        f"{why} but belongs to no pool; label it {POOL_LABEL}=<pool> "
                        "or add the pool to the policy (not used)",
                    )
                )
            continue
        pool = found
        layouts = None
        change = None
        if pool.mig_dynamic is not None:
            layouts, change, unusable = _dynamic_layout(pool, name, node["metadata"], mig)
            if unusable:
                problems.append(NodeProblem(name, f"{unusable} (no new pods placed)"))
        labels = node["metadata"].get("labels") or {}
        cpu = _quantity(allocatable["cpu"], 1000) if "cpu" in allocatable else None
        mem = _quantity(allocatable["memory"], 1) if "memory" in allocatable else None
        built_node, node_slices = pool_node(
            policy,
            pool,
            name,
            index[pool.name],
            labels=tuple(sorted((str(k), str(v)) for k, v in labels.items())),
            cpu_milli=cpu,
            memory_mib=None if mem is None else mem // (1024 * 1024),
            mig_layouts=layouts,
        )
        # What the node must publish: its pool's usual resources, or for a dynamic MIG node
        # those of the layouts it has (or is being given).
        want = (
            expected[pool.name]
            if layouts is None or pool.devices is DeviceApi.DRA  # a DRA node publishes none
            else Counter(policy.flavors[s.flavor].resource_name for s in node_slices)
        )
        # A node being reconfigured publishes whatever its paused device plugin last said.
        bad = [] if change is not None else _mismatches(node, pool, want, allocatable)
        if pool.devices is DeviceApi.DRA:
            bad += _dra_node(policy, pool, node_slices, dra, flavor_devices)
        problems.extend(NodeProblem(name, f"{msg} (no new pods placed)") for msg in bad)
        spec = node.get("spec") or {}
        taints = [
            Taint(str(t["key"]), str(t.get("value") or ""), str(t["effect"]))
            for t in spec.get("taints") or []
        ]
        extra = []
        if bad or (pool.mig_dynamic is not None and layouts is None):
            extra.append(MISMATCH_TAINT)
        if spec.get("unschedulable"):
            extra.append(UNSCHEDULABLE_TAINT)
        if not _ready(node):
            extra.append(NOT_READY_TAINT)
        taints += [t for t in extra if all(t.key != have.key for have in taints)]
        built_node = dataclasses.replace(built_node, taints=tuple(taints))
        index[pool.name] += 1
        built.append(built_node)
        for s in node_slices:
            slices[s.id] = s
    resource_of = {name: f.resource_name for name, f in policy.flavors.items()}
    out, held = _out_of_service(policy, nodes, pools)
    unhealthy = {gpu: f"{f.fault_class}: {f.reason}" for gpu, f in out.items()}
    reported = {
        pod: (node["metadata"]["name"], units)
        for node in nodes
        for pod, units in pod_devices(node).items()
    }
    cluster = ClusterState(tuple(built), MappingProxyType(slices))
    by_flavor = {f: tuple(d.values()) for f, d in sorted(flavor_devices.items())}
    return Inventory(
        cluster,
        tuple(problems),
        MappingProxyType(resource_of),
        MappingProxyType(mig.layouts),
        MappingProxyType(mig.changes),
        MappingProxyType(mig.changed_at),
        MappingProxyType(unhealthy),
        MappingProxyType(reported),
        dra,
        MappingProxyType(by_flavor),
        devices_key(by_flavor),
        MappingProxyType(out),
        MappingProxyType(held),
    )


def _dra_node(
    policy: Policy,
    pool: Pool,
    node_slices: Sequence[Slice],
    dra: DraDevices,
    into: dict[FlavorName, dict[str, Device]],
) -> list[str]:
    """A DRA pool's node checked against its pool; its devices join their flavors'."""
    m = pool.model
    names = (*m.gfd_products, m.id, *m.aliases)
    # each device's least memory: 90 % of the catalog's (drivers report a little less); a
    # shared GPU's replicas are one device, the GPU
    expected = {
        device_unit(s.id.split("/", 1)[1]): (
            m.memory_mib if s.replica is not None else s.memory_mib
        )
        * 9
        // 10
        for s in node_slices
    }
    flavor_of = {device_unit(s.id.split("/", 1)[1]): s.flavor for s in node_slices}
    name = node_slices[0].node if node_slices else ""
    optional = _partitions(pool) if pool.mig_dynamic is not None else {}
    for unit, (flavor, _) in optional.items():
        flavor_of.setdefault(unit, flavor)
    least = {unit: mib for unit, (_, mib) in optional.items()}
    bad = dra_problems(name, expected, names, dra, least)
    if not bad:
        for unit, d in dra.devices.get(name, {}).items():
            into.setdefault(flavor_of[unit], {})[d.key] = d
    return bad


@functools.lru_cache(maxsize=64)
def _partitions(pool: Pool) -> Mapping[str, tuple[FlavorName, int]]:
    """Every partition a dynamic MIG DRA pool's node may publish (each placement of each
    profile its flavors serve, on each GPU): unit -> (its flavor, the least memory in MiB its
    device may have). Each joins its profile's flavor whether or not the layout has it now,
    so a selector for a profile the GPUs are not carved into yet still finds its devices."""
    geom = pool.model.mig
    assert geom is not None
    flavors = {f.profile: f.name for f in pool.flavors() if f.profile is not None}
    # the same for every node of the pool: built once (the cache holds the policy's pools)
    return MappingProxyType(
        {
            f"gpu{g}/{p.name}@{start}": (flavors[p.name], p.memory_mib * 9 // 10)
            for g in range(pool.gpus_per_node)
            for p in geom.profiles
            if p.name in flavors
            for start in p.starts
        }
    )


@dataclass
class _Mig:
    layouts: dict[str, NodeLayout] = field(default_factory=dict)
    changes: dict[str, Change] = field(default_factory=dict)
    changed_at: dict[str, str] = field(default_factory=dict)


def _dynamic_layout(
    pool: Pool, name: str, meta: Mapping[str, Any], mig: _Mig
) -> tuple[Any, Change | None, str | None]:
    """A dynamic MIG node's layouts (None: unusable), its change in flight, and a problem to
    report."""
    annotations = meta.get("annotations") or {}
    try:
        change = node_change(annotations, pool)
        current = node_layout(annotations, pool)
    except ValueError as err:
        return None, None, f"{err}; remove the annotation to start from the policy"
    mig.layouts[name] = current
    for g, at in current.changed_at.items():
        mig.changed_at[f"{name}/gpu{g}"] = at
    layouts = current.layouts
    if change is not None:
        mig.changes[name] = change
        for g in change.gpus:
            mig.changed_at[f"{name}/gpu{g}"] = change.started
        layouts = change.layouts
    return layouts, change, None
