"""A pod set's DRA device requests (what its ResourceClaims ask) as one GPU request.

In a workload document a pod set may carry `deviceClaims`, one entry per device request of
its claims: the device class, how many devices, and the CEL selectors. The Kubernetes view
writes them from the pod's ResourceClaims; a workload file for `plan` writes them by hand.
gpucarve serves NVIDIA's device classes `gpu.nvidia.com` (whole GPUs, or with a capacity
request for memory a share of one GPU) and `mig.nvidia.com` (MIG devices of a static layout),
`ExactCount`; the request's selectors pick the DRA flavors whose devices they match
(`config/device_select.py`). A MIG request must come down to one profile, as a device-plugin
request names one (`nvidia.com/mig-3g.40gb`); a share is the fraction of that memory.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field

from gpucarve.config.device_select import (
    IDENTITY,
    Device,
    Selectors,
    match_flavors,
    policy_devices,
)
from gpucarve.core.amounts import FlavorName, ProfileName
from gpucarve.core.policy import Policy, SliceKind
from gpucarve.core.problems import Path, Problem
from gpucarve.core.quantity import QuantityError, memory_mib
from gpucarve.core.vocabulary import DRA_GPU_CLASS, DRA_MIG_CLASS
from gpucarve.core.workload import GpuKind, GpuRequest

CLASSES = {DRA_GPU_CLASS: SliceKind.WHOLE, DRA_MIG_CLASS: SliceKind.MIG}
SHARED = (SliceKind.TIME_SLICE, SliceKind.MPS)  # a GPU's devices shared by capacity

MAX_DEVICES = 64  # per request: more than any node has GPUs

# Compiled selectors and verdicts, shared by every workload built in this process: a verdict
# depends only on the expression and the device, so sharing never changes one.
JUDGE = Selectors()


class DeviceClaimSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    name: str = Field(default="gpu", min_length=1, max_length=63)  # the request's name
    deviceClassName: str = Field(min_length=1, max_length=253)
    count: int = Field(default=1, ge=1, le=MAX_DEVICES)
    selectors: list[str] = Field(default=[], max_length=32)
    # consumable capacity: a share of one device (`memory: 20Gi`) instead of whole devices
    capacity: dict[str, str | int] = Field(default={}, max_length=8)


def claim_request(
    claims: Sequence[DeviceClaimSpec],
    path: Path,
    policy: Policy,
    devices: Mapping[FlavorName, Sequence[Device]] | None = None,
) -> tuple[GpuRequest | None, list[Problem]]:
    """The GPUs (or MIG devices) the requests ask for, served only by DRA flavors all their
    selectors match. `devices`: each DRA flavor's devices as the cluster publishes them
    (None: the catalog's)."""
    problems: list[Problem] = []
    known = devices if devices is not None else policy_devices(policy)
    allowed: set[FlavorName] | None = None
    kinds: set[SliceKind] = set()
    total = memory = 0
    for i, c in enumerate(claims):
        cpath = (*path, "deviceClaims", i)
        kind = CLASSES.get(c.deviceClassName)
        kinds_of_class = {kind} if kind is not None else set()
        if kind is SliceKind.WHOLE and c.capacity:
            kinds_of_class = set(SHARED)
        if kind is None:
            problems.append(
                Problem(
                    (*cpath, "deviceClassName"),
                    "unknown-device-class",
                    f"device class {c.deviceClassName!r} is not one gpucarve schedules",
                    f"claim whole GPUs with deviceClassName: {DRA_GPU_CLASS}, MIG devices "
                    f"with {DRA_MIG_CLASS}",
                )
            )
            continue
        if c.capacity:
            share, probs = _share(c, cpath)
            problems += probs
            memory = max(memory, share)
        of_class = {f: ds for f, ds in known.items() if policy.flavors[f].kind in kinds_of_class}
        if not of_class:
            problems.append(_no_devices(c, cpath, policy, kinds_of_class))
            continue
        named = [s for s in c.selectors if _IDENTITY_USE.search(s)]
        if named:
            problems.append(_names_one(c, cpath, named[0]))
            continue
        match = match_flavors(c.selectors, of_class, JUDGE)
        if match.unmatched or not match.flavors:
            why = "; ".join(match.unmatched) or "the selectors together match no one device"
            problems.append(
                Problem(
                    (*cpath, "selectors"),
                    "no-device-matches",
                    f"request {c.name!r}: {why} (devices: {_described(of_class)})",
                    "fix the selector to match a device of a DRA pool, or add such a pool",
                )
            )
            continue
        if match.partial:
            problems.append(_singles_out(c, cpath, match.partial))
            continue
        allowed = set(match.flavors) if allowed is None else allowed & set(match.flavors)
        kinds |= kinds_of_class
        total += c.count
    if problems:
        return None, problems
    if memory:
        return _shared_request(path, allowed or set(), kinds, total, memory)
    return _request(policy, path, allowed or set(), kinds, total)


# an attribute that names one device (`.uuid`, `["pcieBusID"]`), read by a selector
_IDENTITY_USE = re.compile(r"""(\.|\[\s*["'])(""" + "|".join(sorted(IDENTITY)) + r")\b")


def _names_one(c: DeviceClaimSpec, cpath: Path, selector: str) -> Problem:
    return Problem(
        (*cpath, "selectors"),
        "device-selector-singles-out",
        f"request {c.name!r}: {selector!r} picks one device by what names it (its uuid or PCI "
        "address); gpucarve places a claim on a kind of device (a flavor), not on one device",
        "select by what every device of the kind shares (productName, memory, architecture, "
        "a MIG profile)",
    )


def _singles_out(
    c: DeviceClaimSpec, cpath: Path, partial: tuple[tuple[str, int, int], ...]
) -> Problem:
    """Selectors that take some devices of a kind and not others (a uuid, an index, a PCI
    address, a driver version some nodes have): gpucarve places by flavor, so it could give
    the claim a device its selectors exclude. Refused rather than honoured in part."""
    which = "; ".join(f"{n} of the {total} devices of {f}" for f, n, total in partial)
    return Problem(
        (*cpath, "selectors"),
        "device-selector-singles-out",
        f"request {c.name!r}: the selectors match {which}; gpucarve places a claim on a kind "
        "of device (a flavor), not on one device",
        "select by what every device of the kind shares (productName, memory, architecture, "
        "a MIG profile), or give those devices a pool of their own",
    )


def _share(c: DeviceClaimSpec, cpath: Path) -> tuple[int, list[Problem]]:
    """The MiB of one device a consumable-capacity request asks for."""
    other = sorted(k for k in c.capacity if k != "memory")
    if other or "memory" not in c.capacity:
        why = f"capacity {', '.join(other) or '(none)'} is not one gpucarve shares a GPU by"
        fix = "ask a share of a GPU as `capacity: {requests: {memory: 20Gi}}`"
        return 0, [Problem((*cpath, "capacity"), "unknown-capacity", why, fix)]
    if c.count != 1:
        why = f"a share of a GPU is one device's, not {c.count}"
        return 0, [Problem((*cpath, "count"), "share-count", why, "set count: 1")]
    try:
        mib = memory_mib(c.capacity["memory"])
    except QuantityError as err:
        return 0, [Problem((*cpath, "capacity", "memory"), "bad-quantity", str(err),
                           "write e.g. 20Gi")]  # fmt: skip
    if mib <= 0:
        fix = "ask for some memory, e.g. 20Gi"
        return 0, [Problem((*cpath, "capacity", "memory"), "out-of-range", "no memory", fix)]
    return mib, []


def _shared_request(
    path: Path, allowed: set[FlavorName], kinds: set[SliceKind], total: int, memory: int
) -> tuple[GpuRequest | None, list[Problem]]:
    where = (*path, "deviceClaims")
    if not allowed or not kinds <= set(SHARED) or total != 1:
        why = "a pod's requests must all share one GPU, or all claim whole devices"
        return None, [Problem(where, "shares-with-devices", why, "split the pod's requests")]
    flavors = tuple(sorted(allowed))
    return GpuRequest(GpuKind.FRACTION, 1, memory_mib=memory, dra=True, flavors=flavors), []


def _request(
    policy: Policy, path: Path, allowed: set[FlavorName], kinds: set[SliceKind], total: int
) -> tuple[GpuRequest | None, list[Problem]]:
    where = (*path, "deviceClaims")
    if not allowed:
        why = "no one DRA flavor matches every request of the pod"
        fix = "make the requests agree on the GPU model (and the MIG profile)"
        return None, [Problem(where, "no-device-matches", why, fix)]
    flavors = tuple(sorted(allowed))
    if kinds != {SliceKind.MIG}:
        return GpuRequest(GpuKind.WHOLE, total, dra=True, flavors=flavors), []
    profiles = sorted({str(policy.flavors[f].profile) for f in flavors})
    if len(profiles) > 1:
        why = f"the requests match MIG devices of profiles {', '.join(profiles)}"
        fix = (
            "gpucarve places one MIG profile per pod: select one, e.g. "
            f'device.attributes["gpu.nvidia.com"].profile == "{profiles[0]}"'
        )
        return None, [Problem(where, "several-mig-profiles", why, fix)]
    return GpuRequest(GpuKind.MIG, total, ProfileName(profiles[0]), dra=True, flavors=flavors), []


def _no_devices(c: DeviceClaimSpec, cpath: Path, policy: Policy, kinds: set[SliceKind]) -> Problem:
    if any(policy.flavors[f].kind in kinds for f in policy_devices(policy)):
        return Problem(
            cpath,
            "no-dra-device",
            f"the request claims {c.count} {c.deviceClassName} device(s) but no node of a DRA "
            "pool publishes such devices in a ResourceSlice",
            "run NVIDIA's DRA driver on the DRA pools' nodes (the scheduler logs each node "
            "that publishes none)",
        )
    return Problem(
        cpath,
        "no-dra-pool",
        f"the request claims {c.count} {c.deviceClassName} device(s) but no pool of the "
        "policy is DRA-managed with such devices",
        "set `devices: dra` on the pools whose nodes run NVIDIA's DRA driver"
        + (" (and `sharing: mig` for MIG devices)" if SliceKind.MIG in kinds else "")
        + (" (and `sharing: time-slicing` or `mps` for shares)" if kinds & set(SHARED) else ""),
    )


def _described(devices: Mapping[FlavorName, Sequence[Device]]) -> str:
    parts = []
    for flavor, found in sorted(devices.items()):
        names = sorted({str(d.attributes.get("productName", "?")) for d in found})
        memory = sorted({d.capacity.get("memory", 0) // (1024**3) for d in found})
        parts.append(f"{flavor}: {', '.join(names)} with {'/'.join(map(str, memory))} GiB")
    return "; ".join(parts)
