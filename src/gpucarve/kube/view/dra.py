"""Dynamic Resource Allocation as the view reads it: the GPUs NVIDIA's DRA driver publishes in
ResourceSlices, what pods' ResourceClaims ask, and which devices allocated claims hold.

- **Devices** (`read_slices`): each device of driver `gpu.nvidia.com` is the unit its
  canonical name gives: type `gpu` `gpu-3` is GPU 3 (the driver names them by minor number),
  type `mig` `gpu-3-mig-9-4-4` is the MIG device of its `profile` attribute at memory slice 4
  of GPU 3; `dra_problems` holds a DRA pool's node to its pool as the inventory holds a
  device-plugin node to its allocatable.
- **Claims as requests** (`attach_claims`): a pending pod's claims (named, or made from its
  template by kube-controller-manager and named in the pod's status) become the pod set's
  `deviceClaims`; a pod whose claim does not exist yet waits for it, and what gpucarve cannot
  serve (a claim another pod holds, `allocationMode: All`, a choice of `firstAvailable`
  alternatives) is refused with why.
- **Claims as holders** (`claim_units`): an allocated claim's devices are held by the pods it
  is reserved for (they reach the view as the devices those pods really got) and, while it is
  reserved for no pod that runs, by the claim itself, so no GPU is promised twice.
- **Allocation** (`allocation_for`): the status gpucarve writes for each claim of a pod it
  binds, the devices taken in the order of the pod's claims and their requests.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from gpucarve.config.device_select import Device, device_from_slice
from gpucarve.core.cluster import ClusterState, Slice
from gpucarve.core.policy import Policy
from gpucarve.core.quantity import QuantityError, parse_quantity
from gpucarve.core.requests import gpu_memory_of, slices_per_pod
from gpucarve.core.vocabulary import DRA_GPU_DRIVER, HOSTNAME_LABEL
from gpucarve.core.workload import GpuKind, GpuRequest

_GPU = re.compile(r"^gpu-(\d{1,3})$")
_MIG = re.compile(r"^gpu-(\d{1,3})-mig-(\d{1,3})-(\d{1,2})-(\d{1,2})$")
# The claim controller of kube-controller-manager deallocates a claim with this finalizer once
# no pod is reserved for it, and then removes it (as it does for kube-scheduler's claims).
DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"
# where a pending pod's claims reach the workload document (never a Kubernetes field)
CLAIMS_KEY = "gpucarve:deviceClaims"
# the node a pending pod must run on because a claim it shares is allocated there
PINNED_KEY = "gpucarve:claimNode"
MIB = 1024 * 1024


@dataclass(frozen=True)
class DraDevices:
    """The driver's devices per node, by *unit* (what the node agent calls a device, and the
    part of a slice id after the node: `gpu3` for a whole GPU, `gpu3/3g.40gb@4` for a MIG
    device of profile 3g.40gb at memory slice 4): unit -> (resource pool, device name), and
    each device as a selector sees it."""

    slots: Mapping[str, Mapping[str, tuple[str, str]]] = field(default_factory=dict)
    devices: Mapping[str, Mapping[str, Device]] = field(default_factory=dict)
    # devices of the driver that are none of those: node -> names
    odd: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # (resource pool, device name) -> (node, unit): what an allocation result names
    located: Mapping[tuple[str, str], tuple[str, str]] = field(default_factory=dict)

    def index_of(self, pool: str, device: str) -> tuple[str, str] | None:
        """(node, unit) of a pool's device."""
        return self.located.get((pool, device))


def _unit(name: str, raw: Mapping[str, Any]) -> str | None:
    """The unit a device of NVIDIA's driver is, from its canonical name (`gpu-<minor>`,
    `gpu-<minor>-mig-<profile id>-<start>-<size>`) and its type and profile attributes."""
    attrs = raw.get("attributes") or {}
    kind = (attrs.get("type") or {}).get("string")
    if kind == "gpu" and (m := _GPU.match(name)) is not None:
        return f"gpu{int(m.group(1))}"
    profile = (attrs.get("profile") or {}).get("string")
    if kind == "mig" and profile and (m := _MIG.match(name)) is not None:
        return f"gpu{int(m.group(1))}/{profile}@{int(m.group(3))}"
    return None


def read_slices(slices: Sequence[Mapping[str, Any]]) -> DraDevices:
    slots: dict[str, dict[str, tuple[str, str]]] = {}
    devices: dict[str, dict[str, Device]] = {}
    odd: dict[str, list[str]] = {}
    for s in sorted(slices, key=lambda s: str(s["metadata"]["name"])):
        spec = s.get("spec") or {}
        node = spec.get("nodeName")
        if spec.get("driver") != DRA_GPU_DRIVER or not node:
            continue
        pool = str((spec.get("pool") or {}).get("name") or node)
        for raw in spec.get("devices") or []:
            name = str(raw.get("name"))
            unit = _unit(name, raw)
            device = device_from_slice(DRA_GPU_DRIVER, raw)
            if unit is None or device is None:
                odd.setdefault(node, []).append(name)
                continue
            slots.setdefault(node, {})[unit] = (pool, name)
            devices.setdefault(node, {})[unit] = device
    located = {at: (node, unit) for node, units in slots.items() for unit, at in units.items()}
    return DraDevices(
        MappingProxyType(slots),
        MappingProxyType(devices),
        MappingProxyType({n: tuple(v) for n, v in odd.items()}),
        MappingProxyType(located),
    )


def dra_problems(
    node: str,
    expected: Mapping[str, int],
    names: Sequence[str],
    dra: DraDevices,
    optional: Mapping[str, int] | None = None,
) -> list[str]:
    """How a DRA pool's node disagrees with its pool: its devices in the driver's
    ResourceSlices (`expected`: unit -> the least memory in MiB its device may have, 90 % of
    what the catalog says; `optional`: the same for devices it may publish, the partitions a
    dynamic MIG pool may carve), their product (`names`: GPU Feature Discovery's spellings of
    the model, spaces written as dashes)."""
    optional = optional or {}
    have = dra.devices.get(node, {})
    if not have:
        return [
            f"publishes no device in a ResourceSlice of {DRA_GPU_DRIVER}, though its pool is "
            "DRA-managed; run NVIDIA's DRA driver on it, or set `devices: device-plugin` on "
            "the pool"
        ]
    out: list[str] = []
    missing = sorted(set(expected) - set(have))
    extra = sorted(set(have) - set(expected) - set(optional))
    if missing or extra:
        parts = [
            *([f"publish {_listed(extra)}, which the pool has not"] if extra else []),
            *([f"lack {_listed(missing)}, which the pool has"] if missing else []),
        ]
        out.append(
            f"its ResourceSlices {' and '.join(parts)} (a GPU is gpuN, a MIG device "
            "gpuN/<profile>@<start>); fix the pool's gpusPerNode or MIG layout, or the node's "
            "driver"
        )
    products = {str(d.attributes.get("productName", "")).replace(" ", "-") for d in have.values()}
    wrong = sorted(products - set(names))
    if wrong:
        out.append(
            f"its DRA devices are {', '.join(wrong)}, the pool's model is {names[0]}; move the "
            "node to a pool of that model or fix the pool's gpuModel"
        )
    short = sorted(
        u
        for u, d in have.items()
        if d.capacity.get("memory", 0) < expected.get(u, optional.get(u, 0)) * MIB
    )
    if short:
        out.append(
            f"DRA devices {', '.join(short)} have less memory than the pool's model says; fix "
            "the pool's gpuModel"
        )
    return out


def _listed(units: Sequence[str]) -> str:
    return ", ".join(units[:8]) + (f" and {len(units) - 8} more" if len(units) > 8 else "")


# ---------------------------------------------------------------------------- claims


@dataclass(frozen=True)
class ClaimRef:
    entry: str  # the pod's name for it (spec.resourceClaims[].name)
    claim: str | None  # namespace/name of the ResourceClaim, None while it does not exist
    template: str | None


def claim_refs(pod: Mapping[str, Any]) -> list[ClaimRef]:
    """The pod's claims, in its order: named ones, and those made from a template (named in
    the pod's status once kube-controller-manager made them)."""
    ns = pod["metadata"]["namespace"]
    made = {
        s.get("name"): s.get("resourceClaimName")
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
    }
    out = []
    for e in (pod.get("spec") or {}).get("resourceClaims") or []:
        name = e.get("resourceClaimName") or made.get(e.get("name"))
        out.append(
            ClaimRef(str(e.get("name")), f"{ns}/{name}" if name else None,
                     e.get("resourceClaimTemplateName"))
        )  # fmt: skip
    return out


def object_key(obj: Mapping[str, Any]) -> str:
    """namespace/name of a namespaced object (a pod, a claim)."""
    return f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"


def claim_requests(claim: Mapping[str, Any]) -> tuple[list[dict[str, Any]], str | None]:
    """The claim's device requests as `deviceClaims` entries, or why gpucarve cannot serve
    them."""
    out: list[dict[str, Any]] = []
    for r in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
        exact = r.get("exactly")
        if exact is None:
            return [], (
                f"request {r.get('name')!r} offers firstAvailable alternatives, which gpucarve "
                "does not choose among yet; ask with `exactly`"
            )
        if exact.get("allocationMode", "ExactCount") != "ExactCount":
            return [], (
                f"request {r.get('name')!r} asks for all matching devices "
                "(allocationMode: All); ask for a count"
            )
        selectors = [
            str((s.get("cel") or {}).get("expression", "")) for s in exact.get("selectors") or []
        ]
        out.append(
            {
                "name": str(r.get("name")),
                "deviceClassName": str(exact.get("deviceClassName", "")),
                "count": int(exact.get("count", 1)),
                "selectors": selectors,
                "capacity": dict((exact.get("capacity") or {}).get("requests") or {}),
            }
        )
    return out, None


def followed(pod: Mapping[str, Any], claim: Mapping[str, Any]) -> bool:
    """Whether the pod shares a claim that is allocated and reserved for another pod: it then
    uses the devices already allocated (on their node) and asks for none."""
    status = claim.get("status") or {}
    name = pod["metadata"]["name"]
    others = [r for r in status.get("reservedFor") or [] if r.get("name") != name]
    return bool(status.get("allocation")) and bool(others)


def claim_node(claim: Mapping[str, Any]) -> str | None:
    """The node an allocated claim's devices are on, from its allocation's node selector
    (`metadata.name In [node]`, as gpucarve and kube-scheduler write it)."""
    selector = ((claim.get("status") or {}).get("allocation") or {}).get("nodeSelector") or {}
    for term in selector.get("nodeSelectorTerms") or []:
        for f in term.get("matchFields") or []:
            values = f.get("values") or []
            if f.get("key") == "metadata.name" and f.get("operator") == "In" and len(values) == 1:
                return str(values[0])
    return None


def _pinned_away(pod: Mapping[str, Any], nodes: set[str]) -> str | None:
    """Why a pod sharing allocated claims cannot run on their node (None: it can)."""
    if len(nodes) > 1:
        return f"dra/claim-shared: the claims it shares are on different nodes ({sorted(nodes)})"
    own = ((pod.get("spec") or {}).get("nodeSelector") or {}).get(HOSTNAME_LABEL)
    if own is not None and own not in nodes:
        return (
            f"dra/claim-shared: its nodeSelector asks for node {own}, the claim it shares is "
            f"allocated on {next(iter(nodes))}; remove the node selector, or claim devices of "
            "its own"
        )
    return None


def _unservable(
    pod: Mapping[str, Any], ref: ClaimRef, claim: Mapping[str, Any] | None
) -> str | None:
    """Why the pod cannot be placed as this claim of it stands (None: it can)."""
    if claim is None:
        made = f", made from template {ref.template!r}" if ref.template else ""
        return (
            f"dra/claim-missing: waiting for its ResourceClaim {ref.claim or ''} (claim "
            f"{ref.entry!r}{made}; kube-controller-manager's resourceclaim controller makes "
            "claims from templates)"
        )
    if followed(pod, claim) and claim_node(claim) is None:
        return (
            f"dra/claim-shared: ResourceClaim {ref.claim} is allocated with no single node in "
            "its node selector; gpucarve places a pod sharing a claim on the claim's node"
        )
    refused = claim_requests(claim)[1]
    if refused is not None:
        return f"dra/claim-unsupported: ResourceClaim {ref.claim}: {refused}"
    return None


def attach_claims(
    pods: Sequence[Mapping[str, Any]], claims: Mapping[str, Mapping[str, Any]]
) -> tuple[list[Mapping[str, Any]], dict[str, str]]:
    """The pending pods with their claims' requests attached (under `CLAIMS_KEY`; the pod's
    resourceVersion then also names its claims' versions, for the workload cache), and per
    pod that cannot be placed as its claims stand, why."""
    out: list[Mapping[str, Any]] = []
    waiting: dict[str, str] = {}
    taken: dict[str, str] = {}  # claim -> the first pending pod that names it
    for pod in pods:
        refs = claim_refs(pod)
        if not refs:
            out.append(pod)
            continue
        key = object_key(pod)
        entries: list[dict[str, Any]] = []
        versions: list[str] = []
        nodes: set[str] = set()
        why = None
        for ref in refs:
            claim = claims.get(ref.claim) if ref.claim else None
            why = _unservable(pod, ref, claim)
            if why is not None or claim is None:
                break
            versions.append(str(claim["metadata"].get("resourceVersion", "")))
            if followed(pod, claim):
                nodes.add(str(claim_node(claim)))  # its devices are allocated already
                continue
            first = taken.setdefault(str(ref.claim), key)
            if first != key:
                # two waiting pods naming one claim not allocated yet: the first is placed and
                # allocates it, then the second follows it to its node
                why = (
                    f"dra/claim-shared: ResourceClaim {ref.claim} is named by pod {first} too, "
                    "placed first; this pod then runs where its devices are"
                )
                break
            entries += claim_requests(claim)[0]
        if why is None and nodes:
            why = _pinned_away(pod, nodes)
        if why is not None:
            waiting[key] = why
            continue
        meta = dict(pod["metadata"])
        if meta.get("resourceVersion"):
            meta["resourceVersion"] = f"{meta['resourceVersion']}+{'+'.join(versions)}"
        pinned = {PINNED_KEY: nodes.pop()} if nodes else {}
        out.append({**pod, "metadata": meta, CLAIMS_KEY: entries, **pinned})
    return out, waiting


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


def device_unit(unit: str) -> str:
    """The device a slice's unit is on: a shared GPU's replica `gpuN/rK` is device `gpuN`."""
    gpu, _, rest = unit.partition("/")
    return gpu if rest.startswith("r") and rest[1:].isdigit() else unit


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


def allocation_for(
    pod: Mapping[str, Any],
    claims: Mapping[str, Mapping[str, Any]],
    node: str,
    slices: Sequence[str],
    dra: DraDevices,
) -> list[tuple[str, dict[str, Any]]]:
    """(claim, its status) for each claim of a pod bound to `slices` of `node` (slice ids,
    `node/gpu3`, `node/gpu3/3g.40gb@4`): their devices in the order of the pod's claims and
    their requests, the node as the allocation's node selector, and the pod as what the claim
    is reserved for. Raises ValueError when the claims and the slices do not add up (a claim
    gone or changed since the cycle)."""
    slots = dra.slots.get(node, {})
    left = [sid.split("/", 1)[1] for sid in slices]
    out: list[tuple[str, dict[str, Any]]] = []
    for ref in claim_refs(pod):
        claim = claims.get(ref.claim) if ref.claim else None
        if claim is None:
            raise ValueError(f"its ResourceClaim for {ref.entry!r} is gone")
        if followed(pod, claim):
            continue  # shared, allocated already: the writer adds the pod to reservedFor
        requests, refused = claim_requests(claim)
        if refused is not None:
            raise ValueError(refused)
        results = []
        for r in requests:
            results += _results(r, left, slots, node, str(claim["metadata"].get("uid", ref.claim)))
        status = {
            "allocation": {
                "devices": {"results": results},
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": [node]}
                        ]}
                    ]
                },
            },
            "reservedFor": [
                {"resource": "pods", "name": pod["metadata"]["name"],
                 "uid": pod["metadata"].get("uid")}
            ],
        }  # fmt: skip
        out.append((str(ref.claim), status))
    if left:
        raise ValueError(f"devices {left} of {node} are claimed by no request of the pod")
    return out


def _results(
    r: Mapping[str, Any],
    left: list[str],
    slots: Mapping[str, tuple[str, str]],
    node: str,
    claim_uid: str,
) -> list[dict[str, Any]]:
    """One request's results, taking its units off the front of `left`: a device per unit,
    or for a share of a GPU (consumable capacity) the GPU of its replicas, once, with the
    memory it consumes and a share id of its own."""
    out: list[dict[str, Any]] = []
    shared = r.get("capacity") or {}
    for _ in range(1 if shared else int(r["count"])):
        unit = device_unit(left[0]) if left else ""
        if unit not in slots:
            raise ValueError(f"no DRA device of {node} left for request {r['name']!r}")
        pool, device = slots[unit]
        result: dict[str, Any] = {
            "request": r["name"], "driver": DRA_GPU_DRIVER, "pool": pool, "device": device
        }  # fmt: skip
        if shared:
            # every replica the engine gave the pod is on this GPU: the share is one result
            while left and device_unit(left[0]) == unit:
                left.pop(0)
            result["consumedCapacity"] = {k: str(v) for k, v in sorted(shared.items())}
            # deterministic: the same claim, request and device give the same id
            result["shareID"] = str(
                uuid.uuid5(uuid.NAMESPACE_URL, f"{claim_uid}/{r['name']}/{device}")
            )
        else:
            left.pop(0)
        out.append(result)
    return out


def devices_key(devices: Mapping[str, Sequence[Device]]) -> str:
    """A fingerprint of each DRA flavor's devices, for caches of what selectors matched."""
    return json.dumps({f: sorted(d.key for d in ds) for f, ds in sorted(devices.items())})
