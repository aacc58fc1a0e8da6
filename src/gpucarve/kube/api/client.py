"""A small Kubernetes REST client: kubeconfig (token or client certificate), JSON calls,
server-side apply, watches. Each thread keeps its own keep-alive connection (the scheduler binds
from a pool of threads); 5xx, 429 and dropped connections are retried with backoff. Errors say
which call failed and why."""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from gpucarve.kube.api.auth import Credentials, load_credentials

FIELD_MANAGER = "gpucarve"
RETRIES = 4
BACKOFF_S = 0.2


class ApiError(RuntimeError):
    def __init__(self, method: str, path: str, status: int, message: str) -> None:
        super().__init__(f"{method} {path}: {status} {message}")
        self.status = status


@dataclass
class Client:
    server: str
    context: ssl.SSLContext
    headers: dict[str, str]
    timeout_s: float = 30.0
    credentials: Credentials | None = None  # a token that renews (exec plugins, rotation)
    # time.monotonic() by which every call must have its answer (a command's whole deadline;
    # None: each call has timeout_s per attempt, for the long-running scheduler)
    deadline: float | None = None
    _local: threading.local = field(default_factory=threading.local, repr=False)

    @classmethod
    def from_kubeconfig(cls, path: str | Path | None = None, context: str | None = None) -> Client:
        """The configuration kubectl would use (see `kube.auth`); `ConfigProblem` if unusable."""
        creds = load_credentials(path, context)
        return cls(creds.server, creds.ssl_context, {}, credentials=creds)

    def _headers(self, extra: dict[str, str]) -> dict[str, str]:
        headers = {**self.headers, **extra}
        if self.credentials is not None:
            token = self.credentials.authorization()
            if token:
                headers["Authorization"] = token
        return headers

    def _connect(self, timeout_s: float) -> http.client.HTTPConnection:
        url = urllib.parse.urlsplit(self.server)
        host, port = url.hostname or "localhost", url.port
        if url.scheme == "https":
            return http.client.HTTPSConnection(host, port, timeout=timeout_s, context=self.context)
        return http.client.HTTPConnection(host, port, timeout=timeout_s)

    def _left(self, method: str, path: str) -> float:
        """Seconds this attempt may take: timeout_s, or what is left of the deadline."""
        if self.deadline is None:
            return self.timeout_s
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise ApiError(method, path, 0, f"no answer from {self.server} in time (the "
                           "command's deadline passed)")  # fmt: skip
        return min(self.timeout_s, left)

    def _send(
        self, method: str, path: str, data: bytes | None, content_type: str
    ) -> tuple[int, bytes]:
        timeout = self._left(method, path)
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._connect(timeout)
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        headers = self._headers({"Content-Type": content_type, "Accept": "application/json"})
        try:
            conn.request(method, path, body=data, headers=headers)
            reply = conn.getresponse()
            return reply.status, reply.read()
        except (OSError, http.client.HTTPException):
            conn.close()
            self._local.conn = None
            raise

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
        *,
        busy_is_answer: bool = False,
    ) -> Any:
        """`busy_is_answer`: a 429 is the call's answer, raised at once, not the server's
        throttling to wait out (the Eviction API refuses with it what a PodDisruptionBudget
        forbids: retried, a scheduling cycle would wait seconds for a refusal)."""
        data = None
        if body is not None:
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        renewed = False
        for attempt in range(RETRIES + 1):
            last = attempt == RETRIES
            try:
                status, raw = self._send(method, path, data, content_type)
            except (OSError, http.client.HTTPException) as err:
                if last:
                    raise ApiError(method, path, 0, f"cannot reach {self.server}: {err}") from None
                self._pause(method, path, attempt)
                continue
            if (status >= 500 or (status == 429 and not busy_is_answer)) and not last:
                self._pause(method, path, attempt)
                continue
            if status == 401 and self.credentials is not None and not renewed:
                renewed = True  # an expired or rotated token: load it again, once
                self.credentials.renew()
                continue
            if status >= 400:
                raise ApiError(method, path, status, _message(raw))
            return json.loads(raw) if raw else None
        raise AssertionError("unreachable")

    def _pause(self, method: str, path: str, attempt: int) -> None:
        """The back-off before a retry, never past the deadline."""
        wait = BACKOFF_S * 2**attempt
        if self.deadline is not None:
            wait = min(wait, max(0.0, self._left(method, path)))
        time.sleep(wait)

    def watch(
        self,
        path: str,
        resource_version: str,
        timeout_s: int = 60,
        opened: Callable[[Callable[[], None]], None] | None = None,
    ) -> Iterator[Any]:
        """Watch events after `resource_version`, one dict per event, until the server ends
        the watch (after about `timeout_s`). A refused watch raises ApiError with its status
        (410 when the version is too old: relist). `opened` is given a function that ends
        the watch from another thread (a stopping informer)."""
        sep = "&" if "?" in path else "?"
        query = (
            f"{path}{sep}watch=1&allowWatchBookmarks=true&timeoutSeconds={timeout_s}"
            f"&resourceVersion={resource_version}"
        )
        conn = self._connect(timeout_s + 30)
        try:
            conn.request("GET", query, headers=self._headers({"Accept": "application/json"}))
            if opened is not None:
                opened(partial(_shut, conn))
            reply = conn.getresponse()
            if reply.status >= 400:
                raise ApiError("WATCH", path, reply.status, _message(reply.read()))
            for line in reply:
                if not line.strip():
                    continue
                try:
                    event = json.loads(line)
                except ValueError:
                    # a line cut short (the connection shut under it, by a stopping informer
                    # or the network): the watch is over, as for any drop; never a crash
                    raise ApiError("WATCH", path, 0, "watch dropped: an event cut short") from None
                yield event
        except (OSError, http.client.HTTPException) as err:
            raise ApiError("WATCH", path, 0, f"watch dropped: {err}") from None
        finally:
            conn.close()

    def get(self, path: str) -> Any:
        return self.call("GET", path)

    def apply(self, path: str, obj: dict[str, Any]) -> Any:
        """Server-side apply of `obj` at its object path (created or updated)."""
        return self.call(
            "PATCH",
            f"{path}?fieldManager={FIELD_MANAGER}&force=true",
            obj,
            "application/apply-patch+yaml",
        )


def _shut(conn: http.client.HTTPConnection) -> None:
    """End a blocked read on the connection (close() alone does not wake the reader)."""
    sock = conn.sock
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def micro_time(t: datetime) -> str:
    """Kubernetes MicroTime (Lease times)."""
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def rfc3339(t: datetime) -> str:
    """Kubernetes Time, whole seconds (conditions, events)."""
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _message(raw: bytes) -> str:
    try:
        return str(json.loads(raw).get("message", ""))
    except (ValueError, AttributeError):
        return raw[:300].decode(errors="replace")


def object_path(obj: dict[str, Any]) -> str:
    """The REST path of a cluster-scoped object of the kinds gpucarve applies."""
    api, kind, name = obj["apiVersion"], obj["kind"], obj["metadata"]["name"]
    plural = {
        "CustomResourceDefinition": "customresourcedefinitions",
        "PriorityClass": "priorityclasses",
        "Queue": "queues",
        "Cohort": "cohorts",
    }[kind]
    prefix = "/api/v1" if api == "v1" else f"/apis/{api}"
    return f"{prefix}/{plural}/{name}"
