"""GPU pods of governed namespaces that something other than gpucarve bound (`nodeName` at
creation where no webhook stops it, another scheduler): the view charges each to its queue
(`cluster_view._charge_elsewhere`); here each is reported once (a Warning Event, the log,
`gpucarve_pods_bound_elsewhere`) and, under `scheduling.boundElsewhere: evict`, evicted once
through the Eviction API."""

from __future__ import annotations

import logging
from collections import Counter

from gpucarve.kube.api.client import Client
from gpucarve.kube.scheduler.evictions import evict_pod
from gpucarve.kube.scheduler.reporter import Reporter
from gpucarve.kube.view.cluster_view import View
from gpucarve.metrics.scheduler_metrics import SchedulerMetrics

log = logging.getLogger("gpucarve.scheduler")


class BoundElsewhere:
    def __init__(self, client: Client, reporter: Reporter, metrics: SchedulerMetrics) -> None:
        self.client, self.reporter, self.metrics = client, reporter, metrics
        self.reported: set[str] = set()
        self.evicted: set[str] = set()

    def handle(self, view: View, rule: str) -> int:
        """Report the new ones, evict if the rule says so; the evictions requested."""
        found = view.elsewhere
        self.reported &= set(found)  # gone: forgotten
        self.evicted &= set(found)
        evict = rule == "evict"
        evicted = 0
        for pod, queue in sorted(found.items()):
            if pod not in self.reported:
                self.reported.add(pod)
                action = (
                    "evicting it (scheduling.boundElsewhere: evict)"
                    if evict
                    else "kept and never preempted by gpucarve (scheduling.boundElsewhere: keep)"
                )
                message = (
                    "bound past gpucarve's queue (nodeName set at creation, or another "
                    f"scheduler): its GPUs are charged to queue {queue}; {action}"
                )
                log.warning("pod %s %s", pod, message)
                self.reporter.event(pod, "Warning", "BoundElsewhere", message)
            if evict and pod not in self.evicted and evict_pod(self.client, pod, "BoundElsewhere"):
                self.evicted.add(pod)
                evicted += 1
        self.metrics.observe_elsewhere(Counter(found.values()))
        return evicted
