"""GPU health on the Node: the agent's side (write which GPUs are faulty and why, an Event for
each change, remediate the GPUs the scheduler took out of service, the node's taint when the
policy asks) and the scheduler's (read them back).

The agent reports each faulty GPU in the annotation `gpucarve.io/unhealthy-gpus` (JSON: GPU
index -> its reason, fault class, action, since when, the node's boot id and whether it was
reset). The scheduler decides which of them are out of service within the pool's budget
(`core/gpu_faults.py`), holds their free slices out of placement, drains them as each class
says and writes its answer back onto the Node (`gpucarve.io/gpus-out-of-service`), which is
what the agent remediates: a GPU whose class asks for a reset is reset once no process holds
it (one GPU per node per check), then comes back after clean checks; a class that asks for a
reboot sets the node condition `GPURebootRequired` for a remediation controller to act on, and
ends when the node has booted again. The node is tainted `gpucarve.io/gpu-unhealthy:NoSchedule`
only as `gpuHealth.taint` says: when all its GPUs are out (`allUnhealthy`, the default), also
when one out of service waits for a reset (`needsReset`), or never.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from gpucarve.agent.readings import GpuSource, ResetFailed
from gpucarve.agent.tracker import HealthTracker, Verdict
from gpucarve.core.gpu_faults import Action
from gpucarve.core.policy import GpuHealth
from gpucarve.core.vocabulary import (
    REBOOT_CONDITION,
    UNHEALTHY_ANNOTATION,
    UNHEALTHY_TAINT,
)
from gpucarve.kube.api.client import ApiError, Client
from gpucarve.kube.api.events import post_event
from gpucarve.kube.view.nodes.device_truth import (
    FaultEntry,
    boot_id,
    fault_entries,
    out_of_service_gpus,
)

if TYPE_CHECKING:  # it loads gRPC, which only the agent needs
    from gpucarve.agent.publisher import PodDevicesPublisher

log = logging.getLogger("gpucarve.agent")
MERGE = "application/merge-patch+json"


def entry(v: Verdict, boot: str) -> dict[str, Any]:
    return {"reason": v.reason, "class": v.fault_class, "action": str(v.action),
            "since": v.since, "boot": boot, "reset": v.reset}  # fmt: skip


def _verdict(index: int, e: FaultEntry) -> Verdict:
    return Verdict(index, e.reason, e.fault_class, e.action, e.since, e.reset)


class NodeAgent:
    """One check: read the GPUs, decide, remediate, and write what changed onto the Node."""

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
        self.restored = False
        self.path = f"/api/v1/nodes/{node}"
        self.involved = {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node}

    def check(self, xid_wait_ms: int = 0) -> list[Verdict]:
        node = self.client.get(self.path)
        if not self.restored:
            self._restore(node)
        readings = self.source.read()
        now = int(self.clock().timestamp())
        verdicts = self.tracker.observe(readings, self.source.xids(xid_wait_ms), now)
        granted = out_of_service_gpus(node)
        self._remediate(verdicts, granted)
        verdicts = self.tracker.verdicts()  # a reset done or given up on
        self._publish(node, verdicts, granted, len(readings))
        if self.devices is not None:
            self.devices.publish()
        return verdicts

    def _restore(self, node: dict[str, Any]) -> None:
        boot = boot_id(node)
        kept = [
            _verdict(i, e) for i, e in fault_entries(node, boot).items()
            if not (e.action is Action.REBOOT and e.boot != boot)  # rebooted: remedied
        ]  # fmt: skip
        self.tracker.restore(kept)
        self.restored = True

    def _event(self, kind: str, reason: str, message: str) -> None:
        post_event(self.client, self.involved, kind, reason, message, self.clock())

    def _remediate(self, verdicts: list[Verdict], granted: set[int]) -> bool:
        """Reset one GPU the scheduler took out of service that waits for it and that no
        process holds; whether one was reset."""
        for v in verdicts:
            if v.index not in granted or not v.needs_reset or self.source.busy(v.index):
                continue
            try:
                self.source.reset(v.index)
            except ResetFailed as exc:
                log.warning("node %s: GPU %d not reset: %s", self.node, v.index, exc)
                then = "a node reboot is asked for instead"
                if not self.tracker.reset_failed(v.index, str(exc)):
                    then = "tried again at the next check"
                self._event("Warning", "GPUResetFailed", f"GPU {v.index} not reset: {exc}; {then}")
                continue
            self.tracker.was_reset(v.index)
            self._event(
                "Normal",
                "GPUReset",
                f"GPU {v.index} reset ({v.fault_class}: {v.reason}); back in service after "
                f"{self.policy.clean_checks} clean checks",
            )
            return True
        return False

    def _tainted(self, verdicts: list[Verdict], granted: set[int], gpus: int) -> bool:
        out = [v for v in verdicts if v.index in granted]
        rule = self.policy.taint
        return bool(out) and (
            (rule != "never" and len(out) >= gpus)
            or (rule == "needsReset" and any(v.needs_reset for v in out))
        )

    def _reboot_condition(self, node: dict[str, Any], verdicts: list[Verdict],
                          granted: set[int]) -> dict[str, Any] | None:  # fmt: skip
        """The GPURebootRequired condition to write, or None where it stands as it is."""
        wanting = [v for v in verdicts if v.action is Action.REBOOT and v.index in granted]
        conds = (node.get("status") or {}).get("conditions") or []
        had = next((c for c in conds if c.get("type") == REBOOT_CONDITION), None)
        want = "True" if wanting else "False"
        if (had or {}).get("status", "False") == want:
            return None
        why = "; ".join(f"GPU {v.index}: {v.reason}" for v in wanting) or "no GPU needs it"
        stamp = self.clock().strftime("%Y-%m-%dT%H:%M:%SZ")
        return {"type": REBOOT_CONDITION, "status": want, "lastTransitionTime": stamp,
                "lastHeartbeatTime": stamp,
                "reason": "GPUFaultNeedsReboot" if wanting else "NoGPUFault",
                "message": why}  # fmt: skip

    def _publish(
        self, node: dict[str, Any], verdicts: list[Verdict], granted: set[int], gpus: int
    ) -> None:
        boot = boot_id(node)
        before = {i: _verdict(i, e) for i, e in fault_entries(node, boot).items()}
        now = {v.index: v for v in verdicts}
        taints = [t for t in (node.get("spec") or {}).get("taints") or []
                  if t.get("key") != UNHEALTHY_TAINT]  # fmt: skip
        tainted = self._tainted(verdicts, granted, gpus)
        if tainted:
            taints.append({"key": UNHEALTHY_TAINT, "value": "", "effect": "NoSchedule"})
        had_taint = any(
            t.get("key") == UNHEALTHY_TAINT for t in (node.get("spec") or {}).get("taints") or []
        )
        condition = self._reboot_condition(node, verdicts, granted)
        if condition is not None:
            self._write_condition(condition, verdicts)
        if now == before and tainted == had_taint:
            return
        value = (
            json.dumps({str(i): entry(v, boot) for i, v in sorted(now.items())}, sort_keys=True)
            if now else None
        )  # fmt: skip
        patch: dict[str, Any] = {"metadata": {"annotations": {UNHEALTHY_ANNOTATION: value}}}
        if tainted != had_taint:
            patch["spec"] = {"taints": taints}
        try:
            self.client.call("PATCH", self.path, patch, MERGE)
        except ApiError as err:
            log.warning("node %s: GPU health not written: %s", self.node, err)
            return
        self._events(before, now)

    def _write_condition(self, condition: dict[str, Any], verdicts: list[Verdict]) -> None:
        # a strategic merge patch merges conditions by type, leaving the kubelet's alone
        patch = {"status": {"conditions": [condition]}}
        try:
            self.client.call("PATCH", f"{self.path}/status", patch,
                             "application/strategic-merge-patch+json")  # fmt: skip
        except ApiError as err:
            log.warning("node %s: %s not written: %s", self.node, REBOOT_CONDITION, err)
            return
        if condition["status"] == "True":
            self._event("Warning", "GPURebootRequested",
                        f"node reboot requested: {condition['message']}")  # fmt: skip

    def _events(self, before: dict[int, Verdict], now: dict[int, Verdict]) -> None:
        for i, v in sorted(now.items()):
            was = before.get(i)
            if was is None or (was.reason, was.fault_class) != (v.reason, v.fault_class):
                then = (
                    "reported only: it stays in service"
                    if v.action is Action.REPORT
                    else "the scheduler takes it out of service within the pool's budget"
                )
                message = f"GPU {i} faulty ({v.fault_class}, action {v.action}): {v.reason}; {then}"
                self._event("Warning", "GPUUnhealthy", message)
        for i in sorted(set(before) - set(now)):
            checks = self.policy.clean_checks
            self._event(
                "Normal", "GPURecovered", f"GPU {i} back in service after {checks} clean checks"
            )
