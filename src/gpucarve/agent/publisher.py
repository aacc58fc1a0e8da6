"""The node agent's report of the devices pods really got: the kubelet's PodResources list,
mapped to device units through NVML, written onto the Node (`device_truth.POD_DEVICES`) only
when it changed. The scheduler reads it back (`kube/view/nodes/device_truth.py`)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

from gpucarve.agent.pod_devices import PodDevices, PodResourcesError, units_by_pod
from gpucarve.agent.readings import DeviceMap
from gpucarve.core.vocabulary import POD_DEVICES_ANNOTATION as POD_DEVICES
from gpucarve.kube.api.client import ApiError, Client

log = logging.getLogger("gpucarve.agent")
_UNSET = "\0"  # nothing written yet by this process: the first report is always written


class PodDevicesPublisher:
    def __init__(
        self,
        client: Client,
        node: str,
        list_pods: Callable[[], list[PodDevices]],
        device_map: DeviceMap,
    ) -> None:
        self.client, self.node = client, node
        self.list_pods, self.device_map = list_pods, device_map
        self.written = _UNSET
        self.unknown: list[str] = []
        self.failing = False

    def publish(self) -> dict[str, list[str]] | None:
        """Read, map and write; what was read (None when the kubelet could not be asked)."""
        try:
            pods = self.list_pods()
        except PodResourcesError as err:
            if not self.failing:  # once per outage, not every check
                log.warning("node %s: devices in use not read: %s", self.node, err)
            self.failing = True
            return None
        self.failing = False
        units, unknown = units_by_pod(pods, self.device_map.devices())
        if unknown and unknown != self.unknown:
            log.warning("node %s: devices NVML does not know: %s", self.node, ", ".join(unknown))
        self.unknown = unknown
        value = json.dumps(units, sort_keys=True, separators=(",", ":")) if units else None
        if (value if value is not None else "") != self.written:
            patch = {"metadata": {"annotations": {POD_DEVICES: value}}}
            try:
                self.client.call("PATCH", f"/api/v1/nodes/{self.node}", patch,
                                 "application/merge-patch+json")  # fmt: skip
            except ApiError as err:
                log.warning("node %s: devices in use not written: %s", self.node, err)
                return units
            self.written = value if value is not None else ""  # "": the annotation removed
        return units
