"""GPU health on the Node: the agent's side (write which GPUs are out of service, an Event for
each change, the node's taint when the policy asks) and the scheduler's (read them back).

The GPUs out of service are the annotation `gpucarve.io/unhealthy-gpus` (JSON: GPU index ->
reason). The scheduler holds their free slices out of placement
(`kube/view/bound/held_slices.py`); the node's other GPUs stay usable, and pods already on a
failed GPU are reported and, as `gpuHealth.evictPods` says, evicted
(`kube/scheduler/failed_gpus.py`). The node is tainted `gpucarve.io/gpu-unhealthy:NoSchedule`
only as `gpuHealth.taint` says: when all its GPUs are out (`allUnhealthy`, the default), also
when one needs a reset (`needsReset`), or never.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from gpucarve.agent.readings import GpuSource
from gpucarve.agent.tracker import HealthTracker, Verdict
from gpucarve.core.policy import GpuHealth
from gpucarve.core.vocabulary import UNHEALTHY_ANNOTATION, UNHEALTHY_TAINT
from gpucarve.kube.api.client import ApiError, Client
from gpucarve.kube.api.events import post_event
from gpucarve.kube.view.nodes.device_truth import unhealthy_gpus

if TYPE_CHECKING:  # it loads gRPC, which only the agent needs
    from gpucarve.agent.publisher import PodDevicesPublisher

log = logging.getLogger("gpucarve.agent")


class NodeAgent:
    """One check: read the GPUs, decide, and write what changed onto the Node."""

    def __init__(
        self,
        client: Client,
        node: str,
        source: GpuSource,
        policy: GpuHealth,
        clock: Callable[[], datetime],
        devices: PodDevicesPublisher | None = None,
    ) -> None:
        self.client, self.node, self.source = client, node, source
        self.policy = policy
        self.tracker = HealthTracker(policy)
        self.clock = clock
        self.devices = devices

    def check(self, xid_wait_ms: int = 0) -> list[Verdict]:
        readings = self.source.read()
        verdicts = self.tracker.observe(readings, self.source.xids(xid_wait_ms))
        self._publish(verdicts, len(readings))
        if self.devices is not None:
            self.devices.publish()
        return verdicts

    def _publish(self, verdicts: list[Verdict], gpus: int) -> None:
        path = f"/api/v1/nodes/{self.node}"
        node = self.client.get(path)
        before = unhealthy_gpus(node)
        now = {v.index: v.reason for v in verdicts}
        taints = [t for t in (node.get("spec") or {}).get("taints") or []
                  if t.get("key") != UNHEALTHY_TAINT]  # fmt: skip
        rule = self.policy.taint
        tainted = bool(verdicts) and (
            (rule != "never" and len(verdicts) >= gpus)
            or (rule == "needsReset" and any(v.needs_reset for v in verdicts))
        )
        if tainted:
            taints.append({"key": UNHEALTHY_TAINT, "value": "", "effect": "NoSchedule"})
        had_taint = any(
            t.get("key") == UNHEALTHY_TAINT for t in (node.get("spec") or {}).get("taints") or []
        )
        if now == before and tainted == had_taint:
            return
        value = json.dumps({str(k): v for k, v in sorted(now.items())}) if now else None
        patch: dict[str, Any] = {"metadata": {"annotations": {UNHEALTHY_ANNOTATION: value}}}
        if tainted != had_taint:
            patch["spec"] = {"taints": taints}
        try:
            self.client.call("PATCH", path, patch, "application/merge-patch+json")
        except ApiError as err:
            log.warning("node %s: GPU health not written: %s", self.node, err)
            return
        involved = {"apiVersion": "v1", "kind": "Node", "name": self.node, "uid": self.node}
        for i, why in sorted(now.items()):
            if before.get(i) != why:
                message = f"GPU {i} out of service: {why}; gpucarve places nothing new on it"
                post_event(self.client, involved, "Warning", "GPUUnhealthy", message, self.clock())
        for i in sorted(set(before) - set(now)):
            message = f"GPU {i} back in service after {self.policy.clean_checks} clean checks"
            post_event(self.client, involved, "Normal", "GPURecovered", message, self.clock())
