"""A pod set's DRA device requests (what its ResourceClaims ask) as one GPU request.

In a workload document a pod set may carry `deviceClaims`, one entry per device request of
its claims: the device class, how many devices, and the CEL selectors. The Kubernetes view
writes them from the pod's ResourceClaims; a workload file for `plan` writes them by hand.
gpucarve serves whole GPUs of NVIDIA's device class `gpu.nvidia.com` (`ExactCount`); the
request's selectors pick the DRA flavors whose devices they match (`config/device_select.py`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field

from gpucarve.config.device_select import Device, Selectors, match_flavors, policy_devices
from gpucarve.core.policy import Policy
from gpucarve.core.problems import Path, Problem
from gpucarve.core.vocabulary import DRA_GPU_CLASS
from gpucarve.core.workload import GpuKind, GpuRequest

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


def claim_request(
    claims: Sequence[DeviceClaimSpec],
    path: Path,
    policy: Policy,
    devices: Mapping[str, Sequence[Device]] | None = None,
) -> tuple[GpuRequest | None, list[Problem]]:
    """The GPUs the requests ask for, served only by DRA flavors all their selectors match.
    `devices`: each DRA flavor's devices as the cluster publishes them (None: the catalog's)."""
    problems: list[Problem] = []
    known = devices if devices is not None else policy_devices(policy)
    allowed: set[str] | None = None
    total = 0
    for i, c in enumerate(claims):
        cpath = (*path, "deviceClaims", i)
        if c.deviceClassName != DRA_GPU_CLASS:
            problems.append(
                Problem(
                    (*cpath, "deviceClassName"),
                    "unknown-device-class",
                    f"device class {c.deviceClassName!r} is not one gpucarve schedules",
                    f"claim whole GPUs with deviceClassName: {DRA_GPU_CLASS}",
                )
            )
            continue
        if not known:
            problems.append(_no_devices(c, cpath, policy))
            continue
        match = match_flavors(c.selectors, known, JUDGE)
        if match.unmatched or not match.flavors:
            why = "; ".join(match.unmatched) or "the selectors together match no one device"
            problems.append(
                Problem(
                    (*cpath, "selectors"),
                    "no-device-matches",
                    f"request {c.name!r}: {why} (devices: {_described(known)})",
                    "fix the selector to match a device of a DRA pool, or add such a pool",
                )
            )
            continue
        allowed = set(match.flavors) if allowed is None else allowed & set(match.flavors)
        total += c.count
    if problems:
        return None, problems
    if not allowed:
        return None, [
            Problem(
                (*path, "deviceClaims"),
                "no-device-matches",
                "no one DRA flavor matches every request of the pod",
                "make the requests agree on the GPU model",
            )
        ]
    return GpuRequest(GpuKind.WHOLE, total, dra=True, flavors=tuple(sorted(allowed))), []


def _no_devices(c: DeviceClaimSpec, cpath: Path, policy: Policy) -> Problem:
    if policy_devices(policy):
        return Problem(
            cpath,
            "no-dra-device",
            f"the request claims {c.count} {DRA_GPU_CLASS} device(s) but no node of a DRA "
            "pool publishes its GPUs in a ResourceSlice",
            "run NVIDIA's DRA driver on the DRA pools' nodes (the scheduler logs each node "
            "that publishes none)",
        )
    return Problem(
        cpath,
        "no-dra-pool",
        f"the request claims {c.count} {DRA_GPU_CLASS} device(s) but no pool of the policy "
        "is DRA-managed",
        "set `devices: dra` on the pools whose nodes run NVIDIA's DRA driver",
    )


def _described(devices: Mapping[str, Sequence[Device]]) -> str:
    parts = []
    for flavor, found in sorted(devices.items()):
        names = sorted({str(d.attributes.get("productName", "?")) for d in found})
        memory = sorted({d.capacity.get("memory", 0) // (1024**3) for d in found})
        parts.append(f"{flavor}: {', '.join(names)} with {'/'.join(map(str, memory))} GiB")
    return "; ".join(parts)
