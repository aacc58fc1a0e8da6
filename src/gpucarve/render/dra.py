"""What a cluster with DRA pools needs from the policy: the DeviceClass its pods' claims name,
and per DRA pool the node label that keeps the GPU Operator's device plugin off those nodes
(NVIDIA's DRA driver hands their GPUs out; both at once would give one GPU twice).

The DeviceClasses are the ones NVIDIA's DRA driver chart installs: `gpu.nvidia.com` for whole
GPUs (devices of driver `gpu.nvidia.com` whose `type` attribute is `gpu`) and `mig.nvidia.com`
for MIG devices (`type` `mig`). gpucarve reads the class by name; a cluster
that has the driver's chart installed has it already (applying the same object again changes
nothing).
"""

from __future__ import annotations

from typing import Any

from gpucarve.core.policy import DeviceApi, Policy, SharingMode
from gpucarve.core.vocabulary import DRA_GPU_CLASS, DRA_GPU_DRIVER, DRA_MIG_CLASS

DEVICE_PLUGIN_DEPLOY_LABEL = "nvidia.com/gpu.deploy.device-plugin"


def dra_pools(policy: Policy) -> list[str]:
    return [p.name for p in policy.pools if p.devices is DeviceApi.DRA]


def device_classes(policy: Policy) -> list[dict[str, Any]]:
    """The DeviceClasses of the policy's DRA pools: whole GPUs, and MIG devices where a DRA
    pool is carved into them."""
    kinds = {
        "mig" if p.sharing is SharingMode.MIG else "gpu"
        for p in policy.pools
        if p.devices is DeviceApi.DRA
    }
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": _of_type(kind)}}]},
        }
        for kind, name in (("gpu", DRA_GPU_CLASS), ("mig", DRA_MIG_CLASS))
        if kind in kinds
    ]


def _of_type(kind: str) -> str:
    return (
        f"device.driver == '{DRA_GPU_DRIVER}' && "
        f"device.attributes['{DRA_GPU_DRIVER}'].type == '{kind}'"
    )


def node_labels(policy: Policy) -> dict[str, dict[str, str]]:
    """Per DRA pool, the label its nodes carry so that the GPU Operator runs no device plugin
    there."""
    return {name: {DEVICE_PLUGIN_DEPLOY_LABEL: "false"} for name in dra_pools(policy)}
