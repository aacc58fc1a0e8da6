"""What the NVIDIA side needs from a policy: the device plugin's configurations (one named
configuration per pool, selected by the node label `nvidia.com/device-plugin.config`) and the
GPU Operator's Helm values that select them and the MIG manager's ConfigMap.

Formats are k8s-device-plugin's `version: v1` file and the gpu-operator chart's values:
- every configuration runs `migStrategy: mixed`, so MIG instances appear per profile
  (`nvidia.com/mig-3g.40gb`) and whole GPUs as `nvidia.com/gpu`, as gpucarve's placement
  expects; MPS pools run `migStrategy: none` (the plugin refuses MPS with `mixed`); a pool
  with `mig: {strategy: single}` runs `single` (each instance one `nvidia.com/gpu`);
- time-slicing and MPS pools share `nvidia.com/gpu` with `renameByDefault: true`, so shared
  GPUs appear as `nvidia.com/gpu.shared` and never satisfy a request for a whole GPU; a pool
  with `renameByDefault: false` publishes them as `nvidia.com/gpu`, as the plugin does by
  default (a pod asking `nvidia.com/gpu: 1` there gets one replica);
- `failRequestsGreaterThanOne: false`: gpucarve gives a pod several replicas of one GPU for a
  larger share, which the plugin would otherwise refuse.

A DRA pool (`devices: dra`) gets no device-plugin configuration: NVIDIA's DRA driver hands its
GPUs out, and its nodes carry the label that keeps the operator's device plugin off them
(`render/dra.py`); a policy of DRA pools alone switches the device plugin off.
"""

from __future__ import annotations

from typing import Any

import yaml

from gpucarve.core.policy import DeviceApi, Policy, Pool, SharingMode
from gpucarve.render.dra import DEVICE_PLUGIN_DEPLOY_LABEL
from gpucarve.render.migparted import CONFIG_LABEL as MIG_CONFIG_LABEL
from gpucarve.render.migparted import carved_by_mig_manager, config_name

CONFIG_LABEL = "nvidia.com/device-plugin.config"
DEFAULT_CONFIG = "default"
DEVICE_PLUGIN_CONFIG_MAP = "gpucarve-device-plugin-config"
MIG_CONFIG_MAP = "gpucarve-mig-parted-config"
MPS_ROOT = "/run/nvidia/mps"


def device_plugin_config(pool: Pool | None) -> dict[str, Any]:
    """One device-plugin configuration file (`version: v1`); None: the default one."""
    mps = pool is not None and pool.sharing is SharingMode.MPS
    single = pool is not None and pool.mig_single
    doc: dict[str, Any] = {
        "version": "v1",
        "flags": {"migStrategy": "none" if mps else "single" if single else "mixed"},
    }
    if pool is None or pool.sharing not in (SharingMode.TIME_SLICING, SharingMode.MPS):
        return doc
    if mps:
        doc["flags"]["mpsRoot"] = MPS_ROOT
    key = "mps" if mps else "timeSlicing"
    doc["sharing"] = {
        key: {
            "renameByDefault": pool.renamed,
            "failRequestsGreaterThanOne": False,
            "resources": [{"name": "nvidia.com/gpu", "replicas": pool.replicas}],
        }
    }
    return doc


def plugin_pools(policy: Policy) -> list[Pool]:
    """The pools whose GPUs the device plugin publishes (not the DRA driver's)."""
    return sorted(
        (p for p in policy.pools if p.devices is DeviceApi.DEVICE_PLUGIN), key=lambda p: p.name
    )


def device_plugin_configs(policy: Policy) -> dict[str, dict[str, Any]]:
    """Named configurations: `default` (nodes without the label) and one per device-plugin
    pool."""
    out = {DEFAULT_CONFIG: device_plugin_config(None)}
    for pool in plugin_pools(policy):
        out[config_name(pool)] = device_plugin_config(pool)
    return out


def config_map(name: str, namespace: str, data: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": "gpucarve"},
        },
        "data": data,
    }


def device_plugin_config_map(
    policy: Policy, namespace: str, name: str = DEVICE_PLUGIN_CONFIG_MAP
) -> dict[str, Any]:
    data = {
        key: yaml.safe_dump(doc, sort_keys=False)
        for key, doc in device_plugin_configs(policy).items()
    }
    return config_map(name, namespace, data)


def node_labels(policy: Policy) -> dict[str, dict[str, str]]:
    """Per pool, the labels its nodes carry for the NVIDIA side to configure them."""
    out: dict[str, dict[str, str]] = {}
    for pool in policy.pools:
        if pool.devices is DeviceApi.DRA:
            labels = {DEVICE_PLUGIN_DEPLOY_LABEL: "false"}
        else:
            labels = {CONFIG_LABEL: config_name(pool)}
        if carved_by_mig_manager(pool):
            labels[MIG_CONFIG_LABEL] = config_name(pool)
        out[pool.name] = labels
    return out


def gpu_operator_values(
    policy: Policy,
    device_plugin_config_map: str = DEVICE_PLUGIN_CONFIG_MAP,
    mig_config_map: str = MIG_CONFIG_MAP,
) -> dict[str, Any]:
    """Values for the gpu-operator Helm chart (the same fields as its ClusterPolicy spec)."""
    plugin = plugin_pools(policy)
    values: dict[str, Any] = {
        "mig": {"strategy": "mixed"},
        "devicePlugin": {"config": {"name": device_plugin_config_map, "default": DEFAULT_CONFIG}},
        "migManager": {
            "enabled": any(carved_by_mig_manager(p) for p in policy.pools),
            "config": {"name": mig_config_map, "default": "all-disabled"},
        },
    }
    if not plugin:  # every GPU is the DRA driver's
        values["devicePlugin"] = {"enabled": False}
    elif any(p.sharing is SharingMode.MPS for p in plugin):
        values["devicePlugin"]["mps"] = {"root": MPS_ROOT}
    return values
