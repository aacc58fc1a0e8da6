"""Bindings through the pods/binding subresource, in parallel, each carrying the device-level
choice as the `gpucarve.io/assignment` annotation.

A binding made but not yet seen through the watch stays *assumed*, so the next cycle never
hands its slices out again. A bind that fails with 409 is read back: bound as asked, it was our
own binding whose reply was lost (a retry then conflicts); bound elsewhere by gpucarve (an
earlier leader), the slices its annotation names are assumed instead until the watch shows
them. Any other failure, and 404 (the pod was deleted meanwhile), drops the assumption and
wakes the loop, so the pod is placed again (an etcd failure the API server wraps as a 409,
"rpc error: code = Unavailable", reads back unbound and ends here too). A pod whose binding
failed is not placed again before a back-off per pod (1 s, doubling to 60 s, reset by a
binding that holds): a binding that keeps failing (its device ConfigMap's name taken, say)
would otherwise be retried every cycle, many times a second; meanwhile it waits, saying why.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from gpucarve.core.vocabulary import ASSIGNMENT_ANNOTATION as ASSIGNMENT
from gpucarve.kube.api.client import ApiError, Client
from gpucarve.kube.api.informer import Informer
from gpucarve.kube.scheduler.claim_writer import ClaimWriter
from gpucarve.kube.scheduler.device_config import DeviceConfigs
from gpucarve.kube.view.pods.assigned import Assigned, assigned_of
from gpucarve.metrics.scheduler_metrics import SchedulerMetrics

log = logging.getLogger("gpucarve.scheduler")
BACKOFF_FIRST_S = 1.0
BACKOFF_MOST_S = 60.0


@dataclass(frozen=True)
class Backoff:
    """A pod whose binding failed: how often in a row, until when (monotonic), and why."""

    failures: int
    until: float
    error: str

    def reason(self, now: float) -> str:
        return (
            f"bind/failed: binding failed {self.failures} time(s): {self.error}; tried again "
            f"in {max(0, round(self.until - now))} s"
        )


def _split(pod: str) -> tuple[str, str]:
    ns, _, name = pod.partition("/")
    return ns, name


class Binder:
    def __init__(
        self,
        client: Client,
        pods: Informer,
        device_configs: DeviceConfigs,
        metrics: SchedulerMetrics,
        wake: Callable[[], None],
        workers: int,
        claims: ClaimWriter | None = None,
    ) -> None:
        self.client = client
        self.claims = claims
        self.pods = pods
        self.device_configs = device_configs
        self.metrics = metrics
        self.wake = wake
        self.assumed: dict[str, Assigned] = {}
        self.failed: list[str] = []
        self.backoff: dict[str, Backoff] = {}  # pod -> its binding's back-off (under `lock`)
        self.clock: Callable[[], float] = time.monotonic
        self.lock = threading.Lock()
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="bind")
        self._in_flight = 0  # bindings submitted and not done (under `lock`)
        self._idle = threading.Condition(self.lock)  # told when none is in flight

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True)

    def bind(self, jobs: list[tuple[str, Assigned]]) -> None:
        """Assume every job's slices, then bind in the background while the next cycle is
        computed: until the watch shows a pod bound (or its binding fails) it stays assumed."""
        with self.lock:
            for pod, assigned in jobs:
                self.assumed[pod] = assigned
            self._in_flight += len(jobs)
        for pod, assigned in jobs:
            self._pool.submit(self._bind_and_settle, pod, assigned)

    def held_back(self, present: set[str]) -> dict[str, str]:
        """The pods still in their binding's back-off, with why (a pod gone is forgotten)."""
        if not self.backoff:
            return {}
        now = self.clock()
        with self.lock:
            for pod in [p for p in self.backoff if p not in present]:
                del self.backoff[pod]
            return {p: b.reason(now) for p, b in self.backoff.items() if b.until > now}

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no binding is in flight (a gang's pods are bound in part meanwhile),
        `timeout_s` at most; whether none is."""
        with self.lock:
            return self._idle.wait_for(lambda: self._in_flight == 0, timeout_s)

    def _bind_and_settle(self, pod: str, assigned: Assigned) -> None:
        try:
            error = self._bind_one(pod, assigned)
        finally:
            with self.lock:
                self._in_flight -= 1
                if not self._in_flight:
                    self._idle.notify_all()
        if error is None:
            if self.backoff:
                with self.lock:
                    self.backoff.pop(pod, None)
            return
        with self.lock:
            self.failed.append(f"{pod}: {error}")
            if self.assumed.get(pod) == assigned:  # not the truth `_already_bound` found
                self.assumed.pop(pod, None)
            n = self.backoff[pod].failures + 1 if pod in self.backoff else 1
            delay = min(BACKOFF_MOST_S, BACKOFF_FIRST_S * 2 ** (n - 1))
            self.backoff[pod] = Backoff(n, self.clock() + delay, error)
        log.warning("binding %s to %s failed: %s", pod, assigned.node, error)
        self.wake()

    def _bind_one(self, pod: str, a: Assigned) -> str | None:
        ns, name = _split(pod)
        obj = self.pods.get(pod)
        try:
            if obj is not None:
                self.device_configs.write(obj, a)
        except ApiError as err:
            return f"its device ConfigMap: {err}"
        try:
            if obj is not None and self.claims is not None:
                self.claims.write(obj, a)
        except ApiError as err:
            self.device_configs.drop(pod)
            return f"its ResourceClaims: {err}"
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {
                "name": name,
                "namespace": ns,
                "annotations": {ASSIGNMENT: a.annotation()},
            },
            "target": {"apiVersion": "v1", "kind": "Node", "name": a.node},
        }
        try:
            with self.metrics.binding.time():
                self.client.call("POST", f"/api/v1/namespaces/{ns}/pods/{name}/binding", body)
        except ApiError as err:
            if err.status == 409 and self._already_bound(pod, a):
                return None
            self.device_configs.drop(pod)
            if obj is not None and self.claims is not None:
                self.claims.release(obj)
            return str(err)
        return None

    def _already_bound(self, pod: str, a: Assigned) -> bool:
        """After a 409, whether the pod is bound as we asked. Bound elsewhere with gpucarve's
        annotation, its true slices stay assumed until the watch shows them: dropped at once,
        they would look free to the next cycle."""
        ns, name = _split(pod)
        try:
            truth = assigned_of(self.client.get(f"/api/v1/namespaces/{ns}/pods/{name}"))
        except ApiError:
            return False
        if truth is not None and truth != a:
            with self.lock:
                self.assumed[pod] = truth
        return truth == a
