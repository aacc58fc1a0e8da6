"""GPUs out of service on DRA pools, told to Kubernetes' own allocator: one `DeviceTaintRule`
(resource.k8s.io/v1, KEP-5055) per device of the GPU — the GPU itself and its MIG devices —
taint `gpucarve.io/gpu-unhealthy=<fault class>:NoSchedule`, so kube-scheduler (and any other
allocator that honours device taints) allocates no claim to it; the rule is deleted when the
GPU is back. gpucarve holds the GPU's free slices itself (`kube/view/bound/held_slices.py`).

The effect is NoSchedule for every class: a NoExecute taint makes Kubernetes' device-taint
eviction controller delete the pods at once, past their PodDisruptionBudgets; gpucarve drains
as the fault's class says, through the Eviction API (`failed_gpus.py`).

The rules are gpucarve's by their label (`app.kubernetes.io/managed-by: gpucarve`): listed once
when the scheduler starts (a GPU that came back while no scheduler ran loses its rule then),
then kept by this process. An API server that does not serve the kind is told once in the log.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping

from gpucarve.core.gpu_faults import Fault
from gpucarve.core.vocabulary import DRA_GPU_DRIVER, MANAGED_BY, MANAGED_BY_LABEL, UNHEALTHY_TAINT
from gpucarve.kube.api.client import ApiError, Client
from gpucarve.kube.view.nodes.devices import DraDevices

log = logging.getLogger("gpucarve.scheduler")
RULES = "/apis/resource.k8s.io/v1/devicetaintrules"
_UNSAFE = re.compile(r"[^a-z0-9.-]+")


def rule_name(pool: str, device: str) -> str:
    """A DNS subdomain for a device's rule, unique per (resource pool, device)."""
    return _UNSAFE.sub("-", f"gpucarve-{pool}-{device}".lower())[:253].strip("-.")


def wanted(out: Mapping[str, Fault], dra: DraDevices) -> dict[str, tuple[str, str, str]]:
    """Rule name -> (resource pool, device, fault class) for every DRA device of every GPU
    out of service."""
    want: dict[str, tuple[str, str, str]] = {}
    for gpu, f in sorted(out.items()):
        node, _, unit = gpu.rpartition("/")
        for slot, (pool, device) in sorted((dra.slots.get(node) or {}).items()):
            if slot == unit or slot.startswith(f"{unit}/"):
                want[rule_name(pool, device)] = (pool, device, f.fault_class)
    return want


def manifest(name: str, pool: str, device: str, fault_class: str) -> dict[str, object]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name, "labels": {MANAGED_BY_LABEL: MANAGED_BY}},
        "spec": {
            "deviceSelector": {"driver": DRA_GPU_DRIVER, "pool": pool, "device": device},
            "taint": {"key": UNHEALTHY_TAINT, "value": fault_class, "effect": "NoSchedule"},
        },
    }


class DeviceTaints:
    def __init__(self, client: Client) -> None:
        self.client = client
        self.written: dict[str, str] | None = None  # rule name -> fault class; None: unread
        self.served = True

    def _list(self) -> dict[str, str] | None:
        try:
            got = self.client.get(f"{RULES}?labelSelector={MANAGED_BY_LABEL}%3D{MANAGED_BY}")
        except ApiError as err:
            if err.status == 404:
                self.served = False
                log.warning("the API server serves no DeviceTaintRule (resource.k8s.io/v1): "
                            "DRA GPUs out of service are held by gpucarve alone")  # fmt: skip
            else:
                log.warning("DeviceTaintRules not listed: %s", err)
            return None
        return {
            item["metadata"]["name"]: str(((item.get("spec") or {}).get("taint") or {}).get(
                "value", ""))
            for item in got.get("items") or []
        }  # fmt: skip

    def handle(self, out: Mapping[str, Fault], dra: DraDevices) -> None:
        if not self.served:
            return
        want = wanted(out, dra)
        if self.written is None:
            self.written = self._list()
            if self.written is None:
                return
        for name, (pool, device, cls) in want.items():
            if self.written.get(name) == cls:
                continue
            if name in self.written:
                self._delete(name)  # another class: written anew
            try:
                self.client.call("POST", RULES, manifest(name, pool, device, cls))
            except ApiError as err:
                if err.status != 409:
                    log.warning("DeviceTaintRule %s not written: %s", name, err)
                    continue
            self.written[name] = cls
        for name in sorted(set(self.written) - set(want)):
            if self._delete(name):
                del self.written[name]

    def _delete(self, name: str) -> bool:
        try:
            self.client.call("DELETE", f"{RULES}/{name}")
        except ApiError as err:
            if err.status != 404:
                log.warning("DeviceTaintRule %s not deleted: %s", name, err)
                return False
        return True
