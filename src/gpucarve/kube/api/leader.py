"""Leader election on a `coordination.k8s.io/v1` Lease, so two scheduler replicas never both
schedule.

The leader renews the Lease every `renew_s`; another replica takes it only once it has seen the
same holder and `renewTime` for `leaseDurationSeconds` of its own monotonic clock (as client-go
does, so clock skew between machines cannot hand the lease over early). Every write carries the
resourceVersion it read, so two candidates racing for an expired Lease cannot both win (the
loser gets 409 Conflict). A leader that cannot renew within the lease duration steps down
before anyone else may take over.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from gpucarve.kube.api.client import ApiError, Client, micro_time

log = logging.getLogger("gpucarve.leader")


class LeaderElector:
    def __init__(
        self,
        client: Client,
        namespace: str,
        name: str,
        identity: str,
        duration_s: int = 15,
        renew_s: float = 3.0,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.client = client
        self.path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        self.name = name
        self.identity = identity
        self.duration_s = duration_s
        self.renew_s = renew_s
        self.wall = wall
        self._renewed_at: float | None = None  # monotonic time of the last renewal
        self._lost = threading.Event()
        self._observed: tuple[object, object] | None = None
        self._observed_at = 0.0
        # As the last read of the Lease showed it. A renewal refused for a conflict (the
        # Lease changed under us, or a lost reply's retry) is tried again until the deadline;
        # one that finds another holder ends leadership at once.
        self.held_by_another = False

    def is_leader(self) -> bool:
        at = self._renewed_at
        # Step down a little before the lease can expire for the others.
        return at is not None and time.monotonic() - at < self.duration_s * 0.8

    def try_acquire(self) -> bool:
        """One attempt: create the Lease, renew ours, or take an expired one."""
        now = self.wall()
        started = time.monotonic()
        self.held_by_another = False
        try:
            lease: dict[str, Any] | None = self.client.get(f"{self.path}/{self.name}")
        except ApiError as err:
            if err.status != 404:
                raise
            lease = None
        spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.duration_s,
            "acquireTime": micro_time(now),
            "renewTime": micro_time(now),
            "leaseTransitions": 0,
        }
        try:
            if lease is None:
                self.client.call(
                    "POST",
                    self.path,
                    {
                        "apiVersion": "coordination.k8s.io/v1",
                        "kind": "Lease",
                        "metadata": {"name": self.name},
                        "spec": spec,
                    },
                )
            else:
                held = lease.get("spec") or {}
                holder = held.get("holderIdentity")
                self.held_by_another = bool(holder) and holder != self.identity
                record = (holder, held.get("renewTime"))
                if record != self._observed:
                    self._observed, self._observed_at = record, started
                duration = int(held.get("leaseDurationSeconds") or self.duration_s)
                if holder and holder != self.identity and started - self._observed_at < duration:
                    return False
                if holder == self.identity:
                    spec["acquireTime"] = held.get("acquireTime") or spec["acquireTime"]
                    spec["leaseTransitions"] = int(held.get("leaseTransitions") or 0)
                else:
                    spec["leaseTransitions"] = int(held.get("leaseTransitions") or 0) + 1
                body = {**lease, "spec": spec}
                self.client.call("PUT", f"{self.path}/{self.name}", body)
        except ApiError as err:
            if err.status in (409, 422):
                return False
            raise
        self._renewed_at = started
        return True

    def acquire(
        self,
        stop: threading.Event,
        retry_s: float = 1.0,
        on_try: Callable[[], None] | None = None,
    ) -> bool:
        """Block until leader (True) or `stop` is set (False); `on_try` runs before each
        attempt (a standby's liveness)."""
        while not stop.is_set():
            if on_try is not None:
                on_try()
            try:
                if self.try_acquire():
                    log.info("%s is the leader (lease %s)", self.identity, self.name)
                    return True
            except ApiError as err:
                log.warning("lease %s: %s", self.name, err)
            stop.wait(retry_s)
        return False

    def keep_renewing(self, stop: threading.Event) -> threading.Thread:
        def loop() -> None:
            while not stop.wait(self.renew_s):
                try:
                    if not self.try_acquire() and self.held_by_another:
                        break
                except ApiError as err:
                    log.warning("lease %s: renew failed: %s", self.name, err)
                if not self.is_leader():
                    break
            if not stop.is_set():
                log.error("%s lost the lease %s", self.identity, self.name)
            self._renewed_at = None
            self._lost.set()

        t = threading.Thread(target=loop, name="lease renewal", daemon=True)
        t.start()
        return t

    @property
    def lost(self) -> threading.Event:
        return self._lost

    def release(self) -> None:
        """Give the Lease up on a clean exit so a standby takes over at once."""
        try:
            lease = self.client.get(f"{self.path}/{self.name}")
            if (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            lease["spec"]["holderIdentity"] = None
            lease["spec"]["renewTime"] = None
            self.client.call("PUT", f"{self.path}/{self.name}", lease)
        except ApiError as err:
            log.warning("lease %s: release failed: %s", self.name, err)
        self._renewed_at = None
