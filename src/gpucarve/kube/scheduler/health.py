"""The scheduler's probes, served over HTTP for the kubelet.

`/healthz` answers 200 while the process's loop is alive: the scheduler's cycle loop, or a
standby's attempts at the lease, beat within `stale_after_s`; a hung loop gets the pod
restarted. `/readyz` answers 200 once this replica can do its job: a leader (or a replica
without leader election) whose informers have listed everything, or a standby waiting for the
lease (it is ready to take over, and a rollout must not wait for it to lead). The body says
which (`{"leader": ..., "synced": ...}`) for `kubectl describe` and humans. `/metrics` serves the
scheduler's Prometheus metrics (`gpucarve.metrics`) on the same port, and `/history?since=UNIX`
the recorded history (`kube/scheduler/recorder.py`) as JSONL, where the scheduler keeps one.

Served by Starlette on uvicorn in a thread of the scheduler process.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route


@dataclass
class Health:
    stale_after_s: float = 60.0
    clock: Callable[[], float] = time.monotonic
    leader: bool | None = None  # None: no leader election
    synced: bool = False
    _beat: float = field(default=float("-inf"))

    def beat(self) -> None:
        self._beat = self.clock()

    def alive(self) -> bool:
        return self.clock() - self._beat <= self.stale_after_s

    def ready(self) -> bool:
        if self.leader is False:
            return True  # a standby is ready to take over
        return self.synced

    def state(self) -> dict[str, object]:
        return {"alive": self.alive(), "ready": self.ready(), "leader": self.leader,
                "synced": self.synced}  # fmt: skip


# the history's lines (JSONL) of workloads that ended at or after a Unix second (None: all),
# of the namespaces given (None: every namespace)
HistoryFeed = Callable[[int | None, frozenset[str] | None], str]


class HistoryDenied(Exception):
    """A request may not read the history: `status` 401 (who is asking?) or 503 (the API
    server could not say)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


# Who asks for the history (the request's Authorization header): the namespaces whose
# workloads they may read (None: all of them), or HistoryDenied.
HistoryGuard = Callable[[str | None], frozenset[str] | None]


def everyone(_: str | None) -> frozenset[str] | None:
    """The guard that lets every request read everything (behind kubectl port-forward)."""
    return None


def app(
    health: Health,
    registry: CollectorRegistry | None = None,
    history: HistoryFeed | None = None,
    guard: HistoryGuard = everyone,
) -> Starlette:
    async def healthz(_: Request) -> JSONResponse:
        return JSONResponse(health.state(), status_code=200 if health.alive() else 503)

    async def readyz(_: Request) -> JSONResponse:
        ok = health.alive() and health.ready()
        return JSONResponse(health.state(), status_code=200 if ok else 503)

    async def metrics(_: Request) -> Response:
        assert registry is not None
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    async def history_lines(request: Request) -> Response:
        assert history is not None
        raw = request.query_params.get("since", "")
        if raw and not (raw.isdigit() and len(raw) <= 12):
            return JSONResponse({"error": "since is Unix seconds, e.g. ?since=1796000000"}, 400)
        try:
            seen = await run_in_threadpool(guard, request.headers.get("authorization"))
        except HistoryDenied as exc:
            challenge = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
            return JSONResponse({"error": str(exc)}, exc.status, headers=challenge)
        text = await run_in_threadpool(history, int(raw) if raw else None, seen)
        return Response(text, media_type="application/jsonl")

    routes = [Route("/healthz", healthz), Route("/readyz", readyz)]
    if registry is not None:
        routes.append(Route("/metrics", metrics))
    if history is not None:
        routes.append(Route("/history", history_lines))
    return Starlette(routes=routes)


class ThreadServer:
    """uvicorn serving an ASGI app on host:port from a daemon thread. The socket is bound
    here, so a taken port is an `OSError` from `start()` (uvicorn would exit its thread)."""

    def __init__(self, asgi: Starlette, host: str, port: int, what: str = "server") -> None:
        config = uvicorn.Config(asgi, host=host, port=port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.host, self.port, self.what = host, port, what
        self.thread: threading.Thread | None = None

    def start(self, timeout_s: float = 10.0) -> None:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self.port))
        except OSError as exc:
            sock.close()
            raise OSError(f"cannot listen on {self.host}:{self.port}: {exc.strerror}") from None
        sock.set_inheritable(True)
        if self.port == 0:
            self.port = sock.getsockname()[1]
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [sock]}, name=self.what, daemon=True
        )
        self.thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started and time.monotonic() < deadline:
            if not self.thread.is_alive():
                raise OSError(f"the {self.what} on {self.host}:{self.port} could not start")
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        if self.thread is not None:
            self.thread.join(timeout=5)


class ProbeServer(ThreadServer):
    """The probes (and /metrics) of `app(health, registry)`."""

    def __init__(
        self,
        health: Health,
        host: str,
        port: int,
        registry: CollectorRegistry | None = None,
        history: HistoryFeed | None = None,
        guard: HistoryGuard = everyone,
    ) -> None:
        super().__init__(app(health, registry, history, guard), host, port, "probe server")
