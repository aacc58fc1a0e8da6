"""A cycle's evictions on the API server: each pod through the Eviction API (so
PodDisruptionBudgets are honoured: a refused eviction is logged, and the admission that asked
for it is not awaited, so the engine asks again next cycle), with an Event saying why; and, for
each admission that waits for its victims, the pods it waits for (an elastic gang's surplus, or
every pod a gang runs) and the free slices its placement chose, held for it meanwhile."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from types import MappingProxyType

from gpucarve.core.cluster import Allocation
from gpucarve.core.snapshot import Snapshot
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


# Seconds before an admission whose victim's eviction was refused is tried again: the
# Eviction API's own retryAfterSeconds for a disruption budget it enforces. Each cycle instead
# would ask (and log) again several times a second.
REFUSED_RETRY_S = 10


def refusal(refused: Mapping[str, int]) -> str:
    """The reason a pod gives while its victims' eviction is refused (victim -> the refusing
    HTTP status: 429 is a PodDisruptionBudget's; any other, RBAC's 403 say, is named)."""
    names = ", ".join(sorted(refused))
    statuses = set(refused.values())
    by = (
        "a PodDisruptionBudget"
        if statuses == {429}
        else "HTTP " + "/".join(str(s) for s in sorted(statuses))
    )
    again = f"asked again in {REFUSED_RETRY_S} s"
    return f"preemption/refused: the eviction of {names} was refused ({by}); {again}"


# Owner of a free slice an admission's placement chose while it waits for its victims: a
# pod made meanwhile (a moved pod's replacement, above all) must not take it.
AWAITING = "awaiting:"


def awaited_slices(result: CycleResult) -> dict[str, tuple[str, ...]]:
    """Admission that waits for its victims -> the slices its placement chose."""
    return {
        a.workload: tuple(sid for p in a.pods for sid in p.slice_ids)
        for a in result.admissions
        if a.after_evictions
    }


def hold_awaited(snapshot: Snapshot, held: Mapping[str, tuple[str, ...]]) -> Snapshot:
    """The snapshot with the free slices of each awaited admission held by it. The slices its
    victims still hold stay theirs (never held twice): they come free when the victims are
    gone, and then the admission is pending again and placed at once."""
    cluster = snapshot.cluster
    allocs = cluster.allocations
    extra: dict[str, Allocation] = {}
    for workload, sids in sorted(held.items()):
        for sid in sids:
            s = cluster.slices.get(sid)
            if s is not None and sid not in allocs and sid not in extra:
                extra[sid] = Allocation(sid, f"{AWAITING}{workload}", s.compute_milli, s.memory_mib)
    if not extra:
        return snapshot
    held_cluster = cluster.with_allocations(MappingProxyType({**allocs, **extra}))
    return dataclasses.replace(snapshot, cluster=held_cluster)


def evict_pod(client: Client, pod: str, why: str) -> bool:
    """One pod through the Eviction API (its PodDisruptionBudget honoured); False if refused
    (logged with `why`) or already gone."""
    return _evict(client, pod, why) == 0


def _evict(client: Client, pod: str, why: str) -> int | None:
    """0: evicted; None: already gone; else the refusing HTTP status (logged with `why`)."""
    ns, _, name = pod.partition("/")
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": ns},
    }
    try:
        path = f"/api/v1/namespaces/{ns}/pods/{name}/eviction"
        client.call("POST", path, body, busy_is_answer=True)
    except ApiError as err:
        if err.status == 404:
            return None
        log.warning("eviction of %s (%s) refused: %s", pod, why, err)
        return err.status or 1  # no answer at all: refused as well
    return 0


# The Event reason per cause (a move is not a preemption: the pod's controller makes it again
# and it is placed at once elsewhere).
_REASONS = {Cause.TIMEOUT: "GangTimeout", Cause.CONSOLIDATE: "Moved"}


def evict_pods(
    client: Client, reporter: Reporter, view: View, result: CycleResult
) -> dict[str, int]:
    """Evict what each eviction takes; the pods whose eviction was refused, with the status."""
    refused: dict[str, int] = {}
    for e in result.evictions:
        why = _REASONS.get(e.cause, "Preempted")
        for pod in sorted(e.pods or view.running_pods.get(e.workload, ())):
            status = _evict(client, pod, why)
            if status == 0:
                reporter.event(pod, "Normal", why, e.message)
            elif status is not None:
                refused[pod] = status
    return refused
