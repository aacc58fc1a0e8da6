"""Running pods on a GPU the scheduler took out of service: reported once each (a Warning
Event on the pod and the log), and evicted when the fault's class drains by eviction (or the
policy's `gpuHealth.evictPods` says so for every class) — through the Eviction API, so a
PodDisruptionBudget and the pod's termination grace still hold; a refused eviction is tried
again next cycle. A class that lets work finish leaves the pod to end by itself; the agent
remediates the GPU once nothing holds it. A gang that loses a pod this way is a short gang:
its replacement is placed on healthy GPUs, or the gang is released after its timeout
(`engine/gang_timeout.py`)."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from gpucarve.core.gpu_faults import Fault
from gpucarve.core.policy import GpuHealth
from gpucarve.core.snapshot import Snapshot
from gpucarve.kube.api.client import Client
from gpucarve.kube.scheduler.evictions import evict_pod
from gpucarve.kube.scheduler.reporter import Reporter

log = logging.getLogger("gpucarve.scheduler")


def pods_on_failed_gpus(
    snapshot: Snapshot, unhealthy: Mapping[str, str]
) -> dict[str, tuple[str, str]]:
    """Pod (namespace/name) -> (its GPU, why that GPU is out of service), for the running
    pods that hold a slice of such a GPU."""
    out: dict[str, tuple[str, str]] = {}
    if not unhealthy:
        return out
    slices = snapshot.cluster.slices
    for rw in snapshot.running:
        for pa in rw.pods:
            for s in (slices[sid] for sid in pa.slice_ids if sid in slices):
                gpu = f"{s.node}/gpu{s.gpu}"
                why = unhealthy.get(gpu)
                if why is not None:
                    out[pa.pod] = (gpu, f"GPU {s.gpu} of node {s.node} is out of service: {why}")
                    break
    return out


class FailedGpuPods:
    """What the scheduler does each cycle about pods on failed GPUs."""

    def __init__(self, client: Client, reporter: Reporter) -> None:
        self.client, self.reporter = client, reporter
        self.reported: set[str] = set()
        self.evicted: set[str] = set()  # eviction accepted: the pod is going

    def handle(self, snapshot: Snapshot, out: Mapping[str, Fault], health: GpuHealth) -> int:
        """Report the new ones, evict as each fault's class says; the number of evictions
        requested."""
        unhealthy = {gpu: f"{f.fault_class}: {f.reason}" for gpu, f in out.items()}
        found = pods_on_failed_gpus(snapshot, unhealthy)
        # a pod gone, or its GPU back: forgotten (reported again if it comes to that again)
        self.reported &= set(found)
        self.evicted &= set(found)
        evicted = 0
        for pod, (gpu, why) in sorted(found.items()):
            cls = out[gpu].fault_class
            evict = health.evicts(cls)
            if pod not in self.reported:
                self.reported.add(pod)
                action = (
                    f"evicting it (fault class {cls} drains by eviction)"
                    if evict
                    else f"left running (fault class {cls} lets work finish)"
                )
                if health.evict_pods is not None:
                    action = "evicting it (gpuHealth.evictPods)" if evict else "left running"
                log.warning("pod %s: %s; %s", pod, why, action)
                self.reporter.event(pod, "Warning", "OnUnhealthyGPU", f"{why}; {action}")
            if evict and pod not in self.evicted and evict_pod(self.client, pod, why):
                self.evicted.add(pod)
                evicted += 1
        return evicted
