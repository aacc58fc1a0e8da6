"""The mig-parted configuration (`version: v1`, `mig-configs`) for a policy's pools.

One named configuration per pool on a MIG-capable model: `gpucarve-<pool>`. A MIG pool gets its
layout per GPU (`devices: all` when every GPU has the same one, else one entry per GPU index),
limited by `device-filter` to the model's PCI device IDs so the file cannot carve another model
by mistake; a pool that does not use MIG on a MIG-capable model gets `mig-enabled: false`. The
GPU Operator's MIG manager applies a configuration when a node's `nvidia.com/mig.config` label
names it, so each pool's nodes carry `nvidia.com/mig.config=gpucarve-<pool>`. A DRA pool with
dynamic MIG is carved by NVIDIA's DRA driver as claims are prepared (partitionable devices), so
it gets none; a DRA pool with a fixed layout gets one (the driver publishes the instances the
MIG manager made).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from gpucarve.core.policy import DeviceApi, Policy, Pool, SharingMode

CONFIG_LABEL = "nvidia.com/mig.config"


def config_name(pool: Pool) -> str:
    return f"gpucarve-{pool.name}"


def carved_by_mig_manager(pool: Pool) -> bool:
    """Whether the MIG manager sets this pool's GPUs' MIG mode and layout."""
    if pool.model.mig is None:
        return False
    return not (pool.devices is DeviceApi.DRA and pool.mig_dynamic is not None)


def _devices(pool: Pool) -> list[dict[str, Any]]:
    base: dict[str, Any] = {}
    if pool.model.pci_device_ids:
        base["device-filter"] = list(pool.model.pci_device_ids)
    if pool.sharing is not SharingMode.MIG:
        return [{**base, "devices": "all", "mig-enabled": False}]
    counts = [
        dict(sorted(Counter(i.profile for i in layout).items())) for layout in pool.mig_layouts
    ]
    if all(c == counts[0] for c in counts):
        return [{**base, "devices": "all", "mig-enabled": True, "mig-devices": counts[0]}]
    return [
        {**base, "devices": [index], "mig-enabled": True, "mig-devices": c}
        for index, c in enumerate(counts)
    ]


def mig_parted_config(policy: Policy) -> dict[str, Any]:
    configs = {
        config_name(pool): _devices(pool)
        for pool in sorted(policy.pools, key=lambda p: p.name)
        if carved_by_mig_manager(pool)
    }
    return {"version": "v1", "mig-configs": configs}


def node_labels(policy: Policy) -> dict[str, dict[str, str]]:
    """Per pool on a MIG-capable model, the label its nodes need."""
    return {
        pool.name: {CONFIG_LABEL: config_name(pool)}
        for pool in policy.pools
        if carved_by_mig_manager(pool)
    }
