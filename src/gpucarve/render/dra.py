"""What a cluster with DRA pools needs from the policy: the DeviceClass its pods' claims name,
and per DRA pool the node label that keeps the GPU Operator's device plugin off those nodes
(NVIDIA's DRA driver hands their GPUs out; both at once would give one GPU twice).

The DeviceClass is the one NVIDIA's DRA driver chart installs for whole GPUs: devices of driver
`gpu.nvidia.com` whose `type` attribute is `gpu`. gpucarve reads the class by name; a cluster
that has the driver's chart installed has it already (applying the same object again changes
nothing).
"""

from __future__ import annotations

from typing import Any

from gpucarve.core.policy import DeviceApi, Policy
from gpucarve.core.vocabulary import DRA_GPU_CLASS, DRA_GPU_DRIVER

DEVICE_PLUGIN_DEPLOY_LABEL = "nvidia.com/gpu.deploy.device-plugin"


def dra_pools(policy: Policy) -> list[str]:
    return [p.name for p in policy.pools if p.devices is DeviceApi.DRA]


def device_classes(policy: Policy) -> list[dict[str, Any]]:
    """The DeviceClass of whole GPUs, when a pool of the policy is DRA-managed."""
    if not dra_pools(policy):
        return []
    expression = (
        f"device.driver == '{DRA_GPU_DRIVER}' && "
        f"device.attributes['{DRA_GPU_DRIVER}'].type == 'gpu'"
    )
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": DRA_GPU_CLASS},
            "spec": {"selectors": [{"cel": {"expression": expression}}]},
        }
    ]


def node_labels(policy: Policy) -> dict[str, dict[str, str]]:
    """Per DRA pool, the label its nodes carry so that the GPU Operator runs no device plugin
    there."""
    return {name: {DEVICE_PLUGIN_DEPLOY_LABEL: "false"} for name in dra_pools(policy)}
