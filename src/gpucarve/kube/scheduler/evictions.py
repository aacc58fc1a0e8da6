"""A cycle's evictions on the API server: each pod through the Eviction API (so
PodDisruptionBudgets are honoured: a refused eviction is logged, and the admission that asked
for it is not awaited, so the engine asks again after the server's back-off), with an Event
saying why; and, for each admission that waits for its victims, the pods it waits for (an
elastic gang's surplus, or every pod a gang runs) and the free slices its placement chose, held
for it meanwhile.

A budget holds off reclaim of borrowed work for `scheduling.reclaimPastBudgetAfterSeconds` at
most (`PastBudget`): then the pod is deleted, with a `DisruptionTarget` condition and a Warning
Event. A tenant's budget of `maxUnavailable: 0` on borrowed pods would otherwise keep the
lenders from their nominal quota for ever, a way around the queue."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple

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
        pods = view.evicted_with(e.pods or view.running_pods.get(e.workload, ()))
        taken.setdefault(e.workload, set()).update(pods)
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


def refusal(refused: Mapping[str, int], past_s: int | None = None) -> str:
    """The reason a pod gives while its victims' eviction is refused (victim -> the refusing
    HTTP status: 429 is a PodDisruptionBudget's; any other, RBAC's 403 say, is named).
    `past_s`: the victims are reclaimed, and deleted once refused that long."""
    names = ", ".join(sorted(refused))
    statuses = set(refused.values())
    by = (
        "a PodDisruptionBudget"
        if statuses == {429}
        else "HTTP " + "/".join(str(s) for s in sorted(statuses))
    )
    again = f"asked again in {REFUSED_RETRY_S} s"
    if past_s is not None:
        them, their = ("it", "its") if len(refused) == 1 else ("them", "their")
        again += (
            f"; reclaim deletes {them} once {their} budget has refused for {past_s} s"
            " (scheduling.reclaimPastBudgetAfterSeconds)"
        )
    return f"preemption/refused: the eviction of {names} was refused ({by}); {again}"


class Refused(NamedTuple):
    """An admission whose victims' eviction was refused: those victims with the refusing
    status, when to ask again, and the reason its pods give meanwhile (`refusal`)."""

    pods: dict[str, int]
    until: int
    reason: str


# Seconds after its last refusal that a victim the engine no longer asks for is forgotten: a
# later reclaim of it counts afresh. Several retries long, so that a cycle that did not reach
# the reclaimer (its budget of pods spent) does not restart the count.
FORGET_S = 6 * REFUSED_RETRY_S


@dataclasses.dataclass
class PastBudget:
    """When each reclaim victim's eviction was first and last refused by its budget (a 429),
    so that reclaim deletes it once `after_s` has passed since the first (None: budgets hold
    reclaim off for ever). Kept in the leader's memory: a new leader counts afresh, which
    delays a deletion by one bound at most."""

    after_s: int | None
    refused: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)

    def due(self, pod: str, now: int) -> bool:
        """A refusal of `pod` at `now`: True if its budget has held reclaim off long enough."""
        first, _ = self.refused.get(pod, (now, now))
        self.refused[pod] = (first, now)
        return self.after_s is not None and now - first >= self.after_s

    def held_s(self, pod: str, now: int) -> int:
        return now - self.refused.get(pod, (now, now))[0]

    def reclaimed(self, pods: Mapping[str, int]) -> int | None:
        """`after_s` if any of `pods` is a reclaim victim a budget refused, else None."""
        return self.after_s if any(p in self.refused for p in pods) else None

    def forget(self, now: int) -> None:
        self.refused = {p: t for p, t in self.refused.items() if now - t[1] <= FORGET_S}


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


def awaited_holds(snapshot: Snapshot, held: Mapping[str, tuple[str, ...]]) -> dict[str, Allocation]:
    """The free slices of each awaited admission, held by it (`with_held` adds them). The
    slices its victims still hold stay theirs (never held twice): they come free when the
    victims are gone, and then the admission is pending again and placed at once."""
    cluster = snapshot.cluster
    allocs = cluster.allocations
    extra: dict[str, Allocation] = {}
    for workload, sids in sorted(held.items()):
        for sid in sids:
            s = cluster.slices.get(sid)
            if s is not None and sid not in allocs and sid not in extra:
                extra[sid] = Allocation(sid, f"{AWAITING}{workload}", s.compute_milli, s.memory_mib)
    return extra


def with_held(snapshot: Snapshot, extra: Mapping[str, Allocation]) -> Snapshot:
    """The snapshot with `extra` allocated as well (`awaited_holds`)."""
    if not extra:
        return snapshot
    cluster = snapshot.cluster
    held_cluster = cluster.with_allocations(MappingProxyType({**cluster.allocations, **extra}))
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
_REASONS = {Cause.TIMEOUT: "GangTimeout", Cause.CONSOLIDATE: "Moved", Cause.IDLE: "IdleReclaimed"}


def delete_past_budget(client: Client, pod: str, message: str, now: str) -> int | None:
    """Delete a reclaim victim its budget kept past the bound: first its `DisruptionTarget`
    condition (as kube-scheduler's preemption writes it, so that a Job's podFailurePolicy can
    tell the disruption from a failure), then the pod, with its own grace period. 0: deleted;
    None: already gone; else the refusing HTTP status."""
    ns, _, name = pod.partition("/")
    cond = {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "PreemptionByScheduler",
        "message": message,
        "lastTransitionTime": now,
    }
    base = f"/api/v1/namespaces/{ns}/pods/{name}"
    try:
        body = {"status": {"conditions": [cond]}}
        client.call("PATCH", f"{base}/status", body, "application/strategic-merge-patch+json")
        client.call("DELETE", base)
    except ApiError as err:
        if err.status == 404:
            return None
        log.warning("deletion of %s past its disruption budget refused: %s", pod, err)
        return err.status or 1
    return 0


@dataclasses.dataclass(frozen=True)
class Acting:
    """What evictions act with: the API, its Events, when it is (seconds since the origin and
    as an RFC 3339 stamp) and the reclaim victims' refusals so far."""

    client: Client
    reporter: Reporter
    now: int
    stamp: str
    past: PastBudget


def evict_pods(act: Acting, view: View, result: CycleResult) -> dict[str, int]:
    """Evict what each eviction takes; the pods whose eviction was refused, with the status."""
    refused: dict[str, int] = {}
    for e in result.evictions:
        why = _REASONS.get(e.cause, "Preempted")
        own = e.pods or view.running_pods.get(e.workload, ())
        for pod in view.evicted_with(own):
            # a pod sharing a claim with a victim: the claim's devices go back only with it
            message = e.message if pod in own else (
                f"{e.message}; it shares an allocated ResourceClaim with "
                f"{', '.join(q for q in view.claim_partners.get(pod, ()) if q in own)}, "
                "whose devices go back only once every pod sharing it is gone")  # fmt: skip
            status = _evict(act.client, pod, why)
            if status == 429 and e.cause is Cause.RECLAIM and act.past.due(pod, act.now):
                status = _past_budget(act, pod, message)
            if status == 0:
                act.reporter.event(pod, "Normal", why, message)
            elif status is not None:
                refused[pod] = status
    return refused


def _past_budget(act: Acting, pod: str, message: str) -> int | None:
    held = act.past.held_s(pod, act.now)
    text = (
        f"{message}; its PodDisruptionBudget refused the eviction for {held} s, "
        f"scheduling.reclaimPastBudgetAfterSeconds is {act.past.after_s}: deleted"
    )
    status = delete_past_budget(act.client, pod, text, act.stamp)
    if status in (0, None):
        log.warning("%s %s", pod, text)
        act.reporter.event(pod, "Warning", "ReclaimedPastBudget", text)
        return None  # its Event is this one
    return status
