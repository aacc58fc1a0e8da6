"""The GPUs NVIDIA's DRA driver publishes in ResourceSlices (`read_slices`): each device of
driver `gpu.nvidia.com` is the unit its canonical name gives: type `gpu` `gpu-3` is GPU 3 (the
driver names them by minor number), type `mig` `gpu-3-mig-9-4-4` is the MIG device of its
`profile` attribute at memory slice 4 of GPU 3; `dra_problems` holds a DRA pool's node to its
pool as the inventory holds a device-plugin node to its allocatable."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from gpucarve.config.device_select import Device, device_from_slice
from gpucarve.core.vocabulary import DRA_GPU_DRIVER

_GPU = re.compile(r"^gpu-(\d{1,3})$")


MIB = 1024 * 1024
_MIG = re.compile(r"^gpu-(\d{1,3})-mig-(\d{1,3})-(\d{1,2})-(\d{1,2})$")


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


def device_unit(unit: str) -> str:
    """The device a slice's unit is on: a shared GPU's replica `gpuN/rK` is device `gpuN`."""
    gpu, _, rest = unit.partition("/")
    return gpu if rest.startswith("r") and rest[1:].isdigit() else unit
