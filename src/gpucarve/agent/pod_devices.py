"""Which devices the kubelet gave each pod: the kubelet's PodResources API (`List` on the
node-local gRPC socket, `pod-resources/kubelet.sock`; client generated from the published
protobuf, `agent/podresources/`), turned into device units on the node through the NVML
device map (`readings.DeviceSlot`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import grpc

from gpucarve.agent.podresources import api_pb2, api_pb2_grpc
from gpucarve.agent.readings import POD_RESOURCES_SOCKET, DeviceSlot

GPU_RESOURCES = "nvidia.com/"
# time-slicing and MPS replicas are the GPU's UUID with `::<replica>` appended
REPLICA_SEPARATOR = "::"


@dataclass(frozen=True, slots=True)
class PodDevices:
    namespace: str
    name: str
    resource: str
    device_ids: tuple[str, ...]


class PodResourcesError(RuntimeError):
    pass


def list_pod_devices(
    socket: str = POD_RESOURCES_SOCKET, timeout_s: float = 5.0
) -> list[PodDevices]:
    """The NVIDIA devices of every pod the kubelet runs, per container and resource."""
    try:
        with grpc.insecure_channel(f"unix://{socket}") as channel:
            stub = api_pb2_grpc.PodResourcesListerStub(channel)
            reply = stub.List(api_pb2.ListPodResourcesRequest(), timeout=timeout_s)
    except grpc.RpcError as err:
        code = err.code() if isinstance(err, grpc.Call) else None
        raise PodResourcesError(f"the kubelet's PodResources API at {socket}: {code}") from None
    out = []
    for pod in reply.pod_resources:
        for c in pod.containers:
            for d in c.devices:
                if d.resource_name.startswith(GPU_RESOURCES) and d.device_ids:
                    out.append(PodDevices(pod.namespace, pod.name, d.resource_name,
                                          tuple(d.device_ids)))  # fmt: skip
    return out


def units_by_pod(
    pods: Sequence[PodDevices], slots: Mapping[str, DeviceSlot]
) -> tuple[dict[str, list[str]], list[str]]:
    """Pod (namespace/name) -> its device units (sorted; a shared GPU once per replica), and
    the device ids NVML does not know (a GPU that fell off the bus, a stale kubelet entry)."""
    units: dict[str, list[str]] = {}
    unknown: list[str] = []
    for p in pods:
        for device in p.device_ids:
            slot = slots.get(device.split(REPLICA_SEPARATOR, 1)[0])
            if slot is None:
                unknown.append(device)
                continue
            units.setdefault(f"{p.namespace}/{p.name}", []).append(slot.unit())
    return {k: sorted(v) for k, v in sorted(units.items())}, sorted(set(unknown))
