"""What the scheduler tells users, written beside its decisions and never in their way: why
each pod waits (its PodScheduled condition and a FailedScheduling Event, written when the
reason changes), each Queue's status, and pods left running outside the policy. Writes go
through a small pool of threads, pending pods' reasons through `LatestWrites` (one queued write
per pod at most); a lost write costs a message, never a decision."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

from gpucarve.core.policy import Policy
from gpucarve.core.vocabulary import (
    GROUP,
    GROUP_LABELS,
    VERSION,
    WORKLOAD_API_GROUP,
    WORKLOAD_API_VERSION,
)
from gpucarve.engine import Held
from gpucarve.engine.decisions import Cause, CycleResult, Plugin
from gpucarve.kube.api.client import ApiError, Client, rfc3339
from gpucarve.kube.api.events import post_event
from gpucarve.kube.scheduler.group_status import group_status, upstream_condition
from gpucarve.kube.scheduler.queue_status import queue_statuses
from gpucarve.kube.scheduler.status_writer import LatestWrites
from gpucarve.kube.view.cluster_view import View
from gpucarve.kube.view.pods.owners import positive_int
from gpucarve.kube.view.pods.pods import group_key

log = logging.getLogger("gpucarve.scheduler")
# Queue statuses are worked out at most this often (by the injected clock): each is a pass over
# every running pod, and under load the loop cycles many times a second. The loop cycles at
# least every `interval_s`, so a status is never more than that plus this behind.
QUEUE_STATUS_EVERY_S = 1.0


_QUEUE_EVERY = timedelta(seconds=QUEUE_STATUS_EVERY_S)


def _split(pod: str) -> tuple[str, str]:
    ns, _, name = pod.partition("/")
    return ns, name


def _key(pod: Mapping[str, Any]) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"


class Reporter:
    def __init__(
        self,
        client: Client,
        clock: Callable[[], datetime],
        uid_of: Callable[[str], str | None] = lambda pod: None,
    ) -> None:
        """`uid_of`: a pod's uid by namespace/name (from the informer), which ties an Event
        to the pod: `kubectl describe pod` selects Events by the involved object's uid."""
        self.client = client
        self.clock = clock
        self.uid_of = uid_of
        self._side = ThreadPoolExecutor(2, thread_name_prefix="status")
        self._reasons = LatestWrites(self._write_pending)
        self.reported: dict[str, str] = {}  # pod -> last message written to its condition
        self.told: set[str] = set()  # pods given a reason while pending, kept over a reset
        self.queue_status: dict[str, dict[str, Any]] = {}
        self._queues_at: tuple[datetime, Policy] | None = None  # last worked out, and by
        self.orphans_reported: set[str] = set()
        self.moves_reported: set[str] = set()
        self.group_status: dict[tuple[str, str], dict[str, Any]] = {}
        # Workload API PodGroups: the PodGroupInitiallyScheduled condition last written
        self.upstream_status: dict[tuple[str, str], dict[str, Any]] = {}
        self.timed_out: dict[tuple[str, str], str] = {}  # gang -> why it was released
        # gang -> (its Scheduled condition's status, since when): lastTransitionTime
        self.group_since: dict[tuple[str, str], tuple[str, str]] = {}

    def reset(self) -> None:
        """A new policy: every message is written again under it."""
        self.reported.clear()
        self.group_status.clear()
        self.upstream_status.clear()
        self.orphans_reported.clear()

    def shutdown(self) -> None:
        self._reasons.shutdown()
        self._side.shutdown(wait=True)

    def bound(self, pod: str) -> None:
        self.reported.pop(pod, None)
        self.told.discard(pod)
        self._reasons.drop(pod)

    def queues(
        self,
        policy: Policy,
        view: View,
        result: CycleResult,
        waiting: dict[str, frozenset[str]],
        held: Callable[[], Held | None] | None = None,
        epoch: datetime | None = None,
    ) -> None:
        """Each Queue's status after the cycle, written where it changed; worked out at most
        every `QUEUE_STATUS_EVERY_S` under one policy (a new policy's cycle always). `held`:
        asks what the cycle's engine says the queues hold (`Engine.held`), only when due."""
        now = self.clock()
        last = self._queues_at
        if last is not None and last[1] is policy and now - last[0] < _QUEUE_EVERY:
            return
        self._queues_at = (now, policy)
        waiting_ids = [w for w in view.snapshot.pending if w.id in waiting]
        epoch_s = int(epoch.timestamp()) if epoch is not None else 0
        for name, status in queue_statuses(
            policy, view.snapshot.running, result, waiting_ids, held() if held else None, epoch_s
        ).items():
            if self.queue_status.get(name) != status:
                self.queue_status[name] = status
                self._side.submit(self._write_queue_status, name, status)

    def groups(
        self,
        objects: Sequence[Mapping[str, Any]],
        pods: Sequence[Mapping[str, Any]],
        assumed: frozenset[str],
        result: CycleResult,
        epoch: datetime,
    ) -> None:
        """Each gpucarve PodGroup's status (`group_status`), written where it changed; call
        after `pending`, whose messages are the waiting gangs' reasons. `epoch`: the time
        the cycle's seconds count from (a reservation's expected start is shown as a time)."""
        for e in result.evictions:
            if e.cause is Cause.TIMEOUT:
                self.timed_out[_split(e.workload)] = e.message
        if not objects:
            self.timed_out.clear()
            return
        reserved = {
            _split(r.workload): {
                "nodes": list(r.nodes),
                "expectedStart": rfc3339(epoch + timedelta(seconds=r.start)),
                "waitsFor": list(r.waits_for),
            }
            for r in result.reservations
        }
        seen: set[tuple[str, str]] = set()
        for gk, obj, mine, reason in self._with_members(objects, pods, _labelled):
            seen.add(gk)
            minimum = int((obj.get("spec") or {}).get("minMember") or 1)
            held = reserved.get(gk)
            status = group_status(minimum, mine, assumed, reason, self.timed_out.get(gk), held)
            if status["conditions"][0]["status"] == "True":
                self.timed_out.pop(gk, None)
            old = self.group_status.get(gk)
            if old == status:
                continue
            self.group_status[gk] = status
            self._side.submit(self._write_group_status, gk, status)
        for gk in [k for k in self.group_status if k not in seen]:
            del self.group_status[gk]
            self.group_since.pop(gk, None)
        self.timed_out = {k: v for k, v in self.timed_out.items() if k in seen}

    def upstream_groups(
        self,
        objects: Sequence[Mapping[str, Any]],
        pods: Sequence[Mapping[str, Any]],
        assumed: frozenset[str],
    ) -> None:
        """Each Workload API PodGroup's `PodGroupInitiallyScheduled` condition
        (`upstream_condition`), written where it changed; call after `pending`."""
        seen: set[tuple[str, str]] = set()
        for gk, obj, mine, reason in self._with_members(objects, pods, _scheduling_group):
            seen.add(gk)
            gang = ((obj.get("spec") or {}).get("schedulingPolicy") or {}).get("gang") or {}
            minimum = positive_int(gang.get("minCount")) or 1
            current = (obj.get("status") or {}).get("conditions") or []
            cond = upstream_condition(minimum, mine, assumed, reason, current)
            if cond is None or self.upstream_status.get(gk) == cond:
                continue
            self.upstream_status[gk] = cond
            self._side.submit(self._write_upstream_status, gk, cond)
        for gk in [k for k in self.upstream_status if k not in seen]:
            del self.upstream_status[gk]

    def _with_members(
        self,
        objects: Sequence[Mapping[str, Any]],
        pods: Sequence[Mapping[str, Any]],
        joins: Callable[[Mapping[str, Any]], bool],
    ) -> Iterator[tuple[tuple[str, str], Mapping[str, Any], list[Mapping[str, Any]], str | None]]:
        """Each group object with its pods (those `joins` says name a group, in name order)
        and the reason a waiting one of them was given. No objects, no pass over the pods (a
        dialect the API server serves but nobody uses costs nothing per cycle)."""
        if not objects:
            return
        members: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
        for pod in pods:
            if joins(pod):
                members.setdefault(group_key(pod), []).append(pod)
        for obj in objects:
            meta = obj["metadata"]
            gk = (meta["namespace"], meta["name"])
            mine = sorted(members.get(gk, []), key=lambda p: p["metadata"]["name"])
            reason = next((m for p in mine if (m := self.reported.get(_key(p)))), None)
            yield gk, obj, mine, reason

    def _write_upstream_status(self, gk: tuple[str, str], cond: dict[str, Any]) -> None:
        ns, name = gk
        body = {"status": {"conditions": [{**cond, "lastTransitionTime": rfc3339(self.clock())}]}}
        path = (
            f"/apis/{WORKLOAD_API_GROUP}/{WORKLOAD_API_VERSION}/namespaces/{ns}/podgroups/"
            f"{name}/status"
        )
        try:
            # a strategic merge keeps the conditions others write (DisruptionTarget)
            self.client.call("PATCH", path, body, "application/strategic-merge-patch+json")
        except ApiError as err:
            if err.status != 404:
                log.warning("status of pod group %s/%s not written: %s", ns, name, err)
                self.upstream_status.pop(gk, None)  # retried next cycle

    def _write_group_status(self, gk: tuple[str, str], status: dict[str, Any]) -> None:
        ns, name = gk
        cond = dict(status["conditions"][0])
        since = self.group_since.get(gk)
        if since is None or since[0] != cond["status"]:
            since = self.group_since[gk] = (cond["status"], rfc3339(self.clock()))
        cond["lastTransitionTime"] = since[1]
        body = {**status, "conditions": [cond]}
        path = f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/podgroups/{name}/status"
        if not self._patch_status(path, body, f"pod group {ns}/{name}"):
            self.group_status.pop(gk, None)  # retried next cycle

    def _write_queue_status(self, name: str, status: dict[str, Any]) -> None:
        path = f"/apis/{GROUP}/{VERSION}/queues/{name}/status"
        if not self._patch_status(path, status, f"queue {name}"):
            self.queue_status.pop(name, None)  # retried next cycle

    def _patch_status(self, path: str, status: dict[str, Any], what: str) -> bool:
        """Replace an object's whole status (a JSON patch: a merge patch would keep flavors
        no longer in use); False when it should be tried again. An object that was never
        applied (404) has nothing to write to."""
        try:
            self.client.call(
                "PATCH",
                path,
                [{"op": "add", "path": "/status", "value": status}],
                "application/json-patch+json",
            )
        except ApiError as err:
            if err.status == 404:
                return True
            log.warning("status of %s not written: %s", what, err)
            return False
        return True

    def pending(
        self,
        view: View,
        result: CycleResult,
        waiting: dict[str, frozenset[str]],
        why: Mapping[str, str] | None = None,
    ) -> int:
        """Write each waiting pod's reason where it changed; the number of pods waiting.
        `why`: the reason of those of `waiting` that are not simply waiting for victims to
        exit (their eviction was refused)."""
        messages: dict[str, str] = dict(view.invalid)
        for p in result.pending:
            # Not tried this cycle (it placed its budget of pods): the reason written when it
            # was last tried still stands; a pod never tried yet says it waits its turn.
            untried = p.reason.plugin is Plugin.CYCLE_BUDGET
            for pods in view.pending_sets.get(p.workload, ()):
                for pod in pods:
                    old = self.reported.get(pod) if untried else None
                    messages[pod] = str(p.reason) if old is None else old
        for w, victims in waiting.items():
            msg = f"preemption/waiting: for {', '.join(sorted(victims))} to exit"
            if why and w in why:
                msg = why[w]
            for pods in view.pending_sets.get(w, ()):
                for pod in pods:
                    messages[pod] = msg
        for pod, msg in sorted(messages.items()):
            if (old := self.reported.get(pod)) != msg:
                self.reported[pod] = msg
                self._reasons.offer(pod, msg, fresh=old is None and pod not in self.told)
                self.told.add(pod)
        for pod in [p for p in self.reported if p not in messages]:
            del self.reported[pod]
            self._reasons.drop(pod)
        self.told &= set(messages)
        return len(messages)

    def _write_pending(self, pod: str, message: str) -> None:
        ns, name = _split(pod)
        cond = {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": message,
            "lastTransitionTime": rfc3339(self.clock()),
        }
        try:
            self.client.call(
                "PATCH",
                f"/api/v1/namespaces/{ns}/pods/{name}/status",
                {"status": {"conditions": [cond]}},
                "application/strategic-merge-patch+json",
            )
        except ApiError as err:
            if err.status != 404:
                log.warning("condition of %s not written: %s", pod, err)
            return
        self.event(pod, "Warning", "FailedScheduling", message)

    def orphans(self, view: View) -> None:
        for pod, why in sorted(view.orphans.items()):
            if pod in self.orphans_reported:
                continue
            self.orphans_reported.add(pod)
            message = (
                f"runs outside the policy ({why}): it keeps its GPUs, which gpucarve neither "
                "counts against a queue nor preempts; fix: give its namespace a queue again, or "
                "let it finish"
            )
            log.warning("%s %s", pod, message)
            self._side.submit(self.event, pod, "Warning", "OutsidePolicy", message)
        self.orphans_reported &= set(view.orphans)

    def device_moves(self, view: View) -> None:
        """Once per pod: the kubelet gave it other devices than gpucarve chose."""
        for pod, what in sorted(view.device_moves.items()):
            if pod in self.moves_reported:
                continue
            self.moves_reported.add(pod)
            log.warning("%s: %s", pod, what)
            self._side.submit(self.event, pod, "Normal", "DevicesReconciled", what)
        self.moves_reported &= set(view.device_moves)

    def event(self, pod: str, kind: str, reason: str, message: str) -> None:
        ns, name = _split(pod)
        involved = {"apiVersion": "v1", "kind": "Pod", "name": name, "namespace": ns}
        if uid := self.uid_of(pod):
            involved["uid"] = uid
        post_event(self.client, involved, kind, reason, message, self.clock())


def _labelled(pod: Mapping[str, Any]) -> bool:
    labels = pod["metadata"].get("labels") or {}
    return any(labels.get(k) for k in GROUP_LABELS)


def _scheduling_group(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("spec") or {}).get("schedulingGroup"))
