"""Which devices allocated claims hold (`claim_units`): an allocated claim's devices are held
by the pods it is reserved for (they reach the view as the devices those pods really got) and,
while it is reserved for no pod that runs, by the claim itself, so no GPU is promised twice."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from gpucarve.core.cluster import ClusterState, Slice
from gpucarve.core.policy import Policy
from gpucarve.core.quantity import QuantityError, parse_quantity
from gpucarve.core.requests import gpu_memory_of, slices_per_pod
from gpucarve.core.vocabulary import DRA_GPU_DRIVER
from gpucarve.core.workload import GpuKind, GpuRequest
from gpucarve.kube.view.nodes.devices import MIB, DraDevices
from gpucarve.kube.view.pods.claims import object_key


@dataclass(frozen=True)
class ClaimUnits:
    """Devices allocated claims hold: per pod they are reserved for, (node, units), and per
    claim reserved for no pod, the same."""

    by_pod: Mapping[str, tuple[str, tuple[str, ...]]]
    by_claim: Mapping[str, tuple[str, tuple[str, ...]]]
    # pod -> the other pods an allocated claim it shares is reserved for: its devices go
    # back only once every one of them is gone
    partners: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


def _share_unit(unit: str, result: Mapping[str, Any]) -> str:
    """A result that consumed part of a shared device: `gpuN~<MiB>` (`expand_shares` turns
    it into the replicas it holds)."""
    consumed = (result.get("consumedCapacity") or {}).get("memory")
    if consumed is None:
        return unit
    try:
        mib = math.ceil(parse_quantity(str(consumed)) / MIB)
    except QuantityError:
        return unit
    return f"{unit}~{mib}"


def expand_shares(
    units: Mapping[str, tuple[str, tuple[str, ...]]], cluster: ClusterState, policy: Policy
) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Units with memory shares (`gpuN~<MiB>`) as the replicas of `gpuN` that much memory
    takes, counted as the engine counts a fraction of that memory (`slices_per_pod`)."""
    out: dict[str, tuple[str, tuple[str, ...]]] = {}
    for key, (node, have) in units.items():
        expanded: list[str] = []
        for unit in have:
            gpu, sep, mib = unit.partition("~")
            if not sep:
                expanded.append(unit)
                continue
            replicas = [s for s in _slices_of(cluster, node, gpu) if s.replica is not None]
            if not replicas:
                continue
            flavor = policy.flavors[replicas[0].flavor]
            request = GpuRequest(GpuKind.FRACTION, 1, memory_mib=int(mib))
            gpu_memory = gpu_memory_of(policy, flavor)
            expanded += [gpu] * slices_per_pod(request, flavor, gpu_memory)
        out[key] = (node, tuple(expanded))
    return out


def _slices_of(cluster: ClusterState, node: str, gpu: str) -> list[Slice]:
    try:
        n = cluster.node(node)
    except KeyError:
        return []
    return [cluster.slices[sid] for g in n.gpus if f"gpu{g.index}" == gpu for sid in g.slice_ids]


def claim_units(claims: Sequence[Mapping[str, Any]], dra: DraDevices) -> ClaimUnits:
    by_pod: dict[str, tuple[str, list[str]]] = {}
    by_claim: dict[str, tuple[str, tuple[str, ...]]] = {}
    partners: dict[str, set[str]] = {}
    for claim in sorted(claims, key=object_key):
        status = claim.get("status") or {}
        results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
        found = [
            (at[0], _share_unit(at[1], r))
            for r in results
            if r.get("driver") == DRA_GPU_DRIVER
            and (at := dra.index_of(str(r.get("pool")), str(r.get("device")))) is not None
        ]
        if not found:
            continue
        node = found[0][0]
        units = tuple(u for n, u in found if n == node)
        pods = [
            f"{claim['metadata']['namespace']}/{r.get('name')}"
            for r in status.get("reservedFor") or []
            if r.get("resource") == "pods"
        ]
        # a claim several pods share holds its devices once: through the first it is reserved
        # for (the pod that allocated it, until it is gone); the others ask for none
        for p in pods[:1]:
            have = by_pod.setdefault(p, (node, []))
            have[1].extend(units)
        for p in pods if len(pods) > 1 else ():
            partners.setdefault(p, set()).update(q for q in pods if q != p)
        by_claim[object_key(claim)] = (node, units)
    return ClaimUnits(
        MappingProxyType({p: (n, tuple(u)) for p, (n, u) in by_pod.items()}),
        MappingProxyType(by_claim),
        MappingProxyType({p: tuple(sorted(q)) for p, q in sorted(partners.items())}),
    )
