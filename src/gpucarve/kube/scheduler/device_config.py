"""How a pod that asks only for a gpucarve fraction (or GPU memory) receives its GPU.

Such a pod requests no device-plugin resource, so the kubelet hands it no device. The
webhook gives it `envFrom` a ConfigMap named in its `gpucarve.io/device-config` annotation;
the scheduler writes that ConfigMap — `NVIDIA_VISIBLE_DEVICES` set to the chosen GPUs'
indices on the node, which the NVIDIA container runtime honours — just before it binds the
pod, and the kubelet does not start a container whose ConfigMap is missing. The ConfigMap is
owned by the pod (the garbage collector removes it with the pod); the scheduler also deletes
the ones it wrote once their pod is gone, so nothing depends on the collector running.

A fraction is scheduling and accounting, not isolation: processes on a shared GPU can use
all its memory and compute unless a CUDA-level limiter (HAMi-core) enforces the share; the
ConfigMap carries that limiter's variables too (`CUDA_DEVICE_MEMORY_LIMIT`,
`CUDA_DEVICE_SM_LIMIT`), which are inert without it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from gpucarve.core.vocabulary import DEVICE_CONFIG_ANNOTATION as DEVICE_CONFIG
from gpucarve.core.vocabulary import MANAGED_BY, MANAGED_BY_LABEL
from gpucarve.kube.api.client import ApiError, Client
from gpucarve.kube.view.pods.assigned import Assigned

log = logging.getLogger("gpucarve.scheduler")


def environment(assigned: Assigned) -> dict[str, str]:
    """The container environment of a fraction-only pod bound as `assigned`: its GPUs, its
    request and limit (GPUCARVE_*), and the caps of the layer that enforces them, at the limit
    (a fraction bursts up to it when its GPU has room; the request is what admission
    guarantees): MPS's per-client active-thread percentage and pinned-memory limit on an MPS
    pool, HAMi-core's variables otherwise (inert without HAMi-core: time-slicing itself
    enforces nothing)."""
    env = {"NVIDIA_VISIBLE_DEVICES": ",".join(str(i) for i in assigned.gpus)}
    milli, mem = assigned.fraction_milli, assigned.shared_memory_mib
    milli_cap = assigned.fraction_limit_milli or milli
    mem_cap = assigned.memory_limit_mib or mem
    if milli:
        env["GPUCARVE_GPU_FRACTION_REQUEST"] = str(milli)
        env["GPUCARVE_GPU_FRACTION_LIMIT"] = str(milli_cap)
    if mem:
        env["GPUCARVE_GPU_MEMORY_REQUEST_MIB"] = str(mem)
        env["GPUCARVE_GPU_MEMORY_LIMIT_MIB"] = str(mem_cap)
    if assigned.mps:
        if milli:
            env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(max(1, milli_cap // 10))
        if mem:
            # per device the client sees: it sees only its own, as device 0
            env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = f"0={mem_cap}M"
        return env
    if mem:
        env["CUDA_DEVICE_MEMORY_LIMIT"] = f"{mem_cap}m"
    if milli:
        # percent of the GPU's SMs
        env["CUDA_DEVICE_SM_LIMIT"] = str(max(1, milli_cap // 10))
    return env


def _ours_for(obj: Mapping[str, Any], pod_uid: object) -> bool:
    """A ConfigMap gpucarve wrote for the pod with this uid: its label and owner say so."""
    meta = obj.get("metadata") or {}
    if (meta.get("labels") or {}).get(MANAGED_BY_LABEL) != MANAGED_BY:
        return False
    owners = meta.get("ownerReferences") or []
    return pod_uid is not None and any(
        o.get("kind") == "Pod" and o.get("uid") == pod_uid for o in owners
    )


class DeviceConfigs:
    def __init__(self, client: Client) -> None:
        self.client = client
        self.written: dict[str, tuple[str, str]] = {}  # pod -> (namespace, ConfigMap)
        self._lock = threading.Lock()

    def write(self, pod: Mapping[str, Any], assigned: Assigned) -> None:
        """Before the binding, for a pod that names its device ConfigMap (else nothing)."""
        meta = pod.get("metadata") or {}
        name = (meta.get("annotations") or {}).get(DEVICE_CONFIG)
        if not name:
            return
        ns = str(meta["namespace"])
        owner = {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta.get("uid")}
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "namespace": ns,
                "labels": {MANAGED_BY_LABEL: MANAGED_BY},
                "ownerReferences": [owner],
            },
            "data": environment(assigned),
            # its data never changes once written (a new binding writes it anew); the webhook
            # keeps tenants from deleting or rewriting it (device-configs.validate.gpucarve.io)
            "immutable": True,
        }
        path = f"/api/v1/namespaces/{ns}/configmaps"
        try:
            self.client.call("POST", path, body)
        except ApiError as err:
            if err.status != 409:
                raise
            # Left by an earlier attempt (perhaps for other GPUs): written anew, but only if
            # it is gpucarve's for this very pod; anything else is never touched.
            existing = self.client.get(f"{path}/{name}")
            if not _ours_for(existing, meta.get("uid")):
                raise ApiError(
                    "POST",
                    f"{path}/{name}",
                    409,
                    f"ConfigMap {ns}/{name} exists and is not gpucarve's device ConfigMap for "
                    "this pod; it is left as it is and the pod is not bound",
                ) from err
            self.client.call("DELETE", f"{path}/{name}")
            self.client.call("POST", path, body)
        with self._lock:
            self.written[f"{ns}/{meta['name']}"] = (ns, str(name))

    def drop(self, pod: str) -> None:
        with self._lock:
            where = self.written.pop(pod, None)
        if where is None:
            return
        try:
            self.client.call("DELETE", f"/api/v1/namespaces/{where[0]}/configmaps/{where[1]}")
        except ApiError as err:
            if err.status != 404:
                log.warning("device ConfigMap %s/%s not deleted: %s", *where, err)

    def forget_gone(self, present: set[str]) -> None:
        """Delete the ConfigMaps of pods that no longer exist."""
        with self._lock:
            gone = [p for p in self.written if p not in present]
        for pod in gone:
            self.drop(pod)
