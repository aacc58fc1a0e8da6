"""A cycle's evictions on the API server: each pod through the Eviction API (so
PodDisruptionBudgets are honoured: a refused eviction is logged and the engine asks again next
cycle), with an Event saying why; and, for each admission that waits for its victims, the
pods it waits for (an elastic gang's surplus, or every pod a gang runs)."""

from __future__ import annotations

import logging

from gpucarve.engine.decisions import Cause, CycleResult
from gpucarve.kube.api.client import ApiError, Client
from gpucarve.kube.scheduler.reporter import Reporter
from gpucarve.kube.view.cluster_view import View

log = logging.getLogger("gpucarve.scheduler")


def _taken(view: View, result: CycleResult) -> dict[str, set[str]]:
    taken: dict[str, set[str]] = {}
    for e in result.evictions:
        taken.setdefault(e.workload, set()).update(e.pods or view.running_pods.get(e.workload, ()))
    return taken


def awaited_pods(view: View, result: CycleResult) -> dict[str, frozenset[str]]:
    """Admission -> the pods that must be gone before its pods are bound."""
    taken = _taken(view, result)
    out: dict[str, frozenset[str]] = {}
    for a in result.admissions:
        if a.after_evictions:
            pods: set[str] = set()
            for victim in a.after_evictions:
                pods |= taken.get(victim) or set(view.running_pods.get(victim, ()))
            out[a.workload] = frozenset(pods)
    return out


def evict_pod(client: Client, pod: str, why: str) -> bool:
    """One pod through the Eviction API (its PodDisruptionBudget honoured); False if refused
    (logged with `why`) or already gone."""
    ns, _, name = pod.partition("/")
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": ns},
    }
    try:
        client.call("POST", f"/api/v1/namespaces/{ns}/pods/{name}/eviction", body)
    except ApiError as err:
        if err.status != 404:
            log.warning("eviction of %s (%s) refused: %s", pod, why, err)
        return False
    return True


# The Event reason per cause (a move is not a preemption: the pod's controller makes it again
# and it is placed at once elsewhere).
_REASONS = {Cause.TIMEOUT: "GangTimeout", Cause.CONSOLIDATE: "Moved"}


def evict_pods(client: Client, reporter: Reporter, view: View, result: CycleResult) -> int:
    """Evict what each eviction takes; the number of evictions."""
    for e in result.evictions:
        why = _REASONS.get(e.cause, "Preempted")
        for pod in sorted(e.pods or view.running_pods.get(e.workload, ())):
            if evict_pod(client, pod, why):
                reporter.event(pod, "Normal", why, e.message)
    return len(result.evictions)
