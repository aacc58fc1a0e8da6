"""The dashboard over HTTP: a read-only JSON API on the scheduler's last cycle and the page
that draws it (`static/`: plain HTML, CSS and one JavaScript module, no build step, nothing
fetched from elsewhere).

The scheduler tells the `Board` each cycle's decisions (`Scheduler.observers`); requests read
the board, never the API server (only the access reviews go there). Every API answer carries
the board's generation; the page asks `/api/version` every few seconds and redraws when it
moved (live, without holding a connection per viewer open).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

from starlette.applications import Starlette
from starlette.datastructures import MutableHeaders
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpucarve.dashboard import model
from gpucarve.dashboard.access import Access, Denied
from gpucarve.dashboard.gpu_use import Readings
from gpucarve.dashboard.history import History
from gpucarve.dashboard.model import Frame, Viewer
from gpucarve.kube.scheduler.observed import CycleSeen

STATIC = Path(str(resources.files("gpucarve.dashboard") / "static"))
# No inline script or style, nothing from another origin: the page is what gpucarve serves.
HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


class Board:
    """The latest cycle and what came before it, for the requests' threads."""

    def __init__(self, history: History | None = None) -> None:
        self.history = history or History()
        self.frame: Frame | None = None
        self.at: str | None = None  # when the cycle ran, for people
        self.generation = 0
        self._lock = threading.Lock()
        self._cluster: tuple[int, dict[str, Any]] | None = None

    def observe(self, seen: CycleSeen) -> None:
        frame = Frame(
            seen.snapshot, seen.result, seen.unhealthy, seen.reconfiguring, seen.past_budget
        )
        # to the second: people read it (the page shows it in their own time zone)
        self.show(frame, seen.at.isoformat(timespec="seconds"))

    def show(self, frame: Frame, at: str) -> None:
        with self._lock:
            self.history.add(frame, at)
            self.frame, self.at = frame, at
            self.generation += 1

    def latest(self) -> tuple[int, Frame, str] | None:
        with self._lock:
            if self.frame is None or self.at is None:
                return None
            return self.generation, self.frame, self.at

    def past(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
        """The history as it stands (queue use points, events, idle GPU-hours), copied under
        the lock: the scheduler's thread adds to it while requests read."""
        with self._lock:
            h = self.history
            return list(h.points), list(h.events), h.idle_gpu_hours()

    def cluster(self) -> dict[str, Any] | None:
        """The pools' summary, computed once per generation whoever asks."""
        got = self.latest()
        if got is None:
            return None
        generation, frame, _ = got
        cached = self._cluster
        if cached is not None and cached[0] == generation:
            return cached[1]
        body = model.cluster(frame)
        self._cluster = (generation, body)
        return body


def _json(body: Any, status: int = 200) -> JSONResponse:
    return JSONResponse(body, status_code=status)


def _error(status: int, message: str) -> JSONResponse:
    return _json({"message": message}, status)


Params = Mapping[str, str]  # the path's and the query's parameters
Answer = tuple[int, dict[str, Any]]  # status, body
Handler = Callable[[Params, Viewer, int, Frame, str], Answer]


# a shadow's running difference with the real scheduler (kube/scheduler/shadow.WouldStart)
Shadow = Callable[[], Mapping[str, Any]]


class GpuUseSource(Protocol):
    """What GPUs do, measured (gpu_use.PrometheusGpuUse): readings, and why there are none."""

    url: str

    def read(self) -> tuple[Readings, str | None]: ...


class Pages:
    """The API's answers, each given the viewer and the board's latest cycle."""

    def __init__(
        self, board: Board, shadow: Shadow | None = None, gpu_use: GpuUseSource | None = None
    ) -> None:
        self.board = board
        self.shadow_book = shadow
        self.gpu_use = gpu_use

    def _use(self) -> tuple[Readings, dict[str, Any]]:
        """The GPU readings and what the page says of their source (nothing without one)."""
        if self.gpu_use is None:
            return {}, {}
        readings, error = self.gpu_use.read()
        said: dict[str, Any] = {"source": self.gpu_use.url}
        if error is not None:
            said["error"] = error
        return readings, {"gpuMetrics": said}

    def version(self, params: Params, viewer: Viewer, gen: int, frame: Frame, at: str) -> Answer:
        body = {"generation": gen, "at": at, "now": frame.result.now}
        return 200, {**body, "shadow": self.shadow_book is not None}

    def shadow(self, params: Params, viewer: Viewer, gen: int, frame: Frame, at: str) -> Answer:
        if self.shadow_book is None:
            return 404, {"message": "this scheduler binds; it is not a shadow (--shadow)"}
        return 200, {"generation": gen, **self.shadow_book()}

    def whoami(self, params: Params, viewer: Viewer, gen: int, frame: Frame, at: str) -> Answer:
        ns = None if viewer.namespaces is None else sorted(viewer.namespaces)
        return 200, {"name": viewer.name, "cluster": viewer.cluster, "namespaces": ns}

    def cluster(self, params: Params, viewer: Viewer, gen: int, frame: Frame, at: str) -> Answer:
        body = self.board.cluster() or {}
        readings, said = self._use()
        if said:
            said["use"] = model.cluster_use(frame, readings)
        return 200, {"generation": gen, "at": at, **body, **said}

    def pool(self, params: Params, viewer: Viewer, gen: int, frame: Frame, at: str) -> Answer:
        try:
            offset = max(0, int(params.get("offset", "0")))
        except ValueError:
            return 400, {"message": "offset: a whole number of nodes, e.g. ?offset=200"}
        body = model.pool_nodes(frame, viewer, params["pool"], offset)
        if body is None:
            return 404, {"message": f"no pool {params['pool']!r} in the policy"}
        readings, said = self._use()
        model.with_use(body["nodes"], readings)
        return 200, {"generation": gen, **body, **said}

    def node(self, params: Params, viewer: Viewer, gen: int, frame: Frame, at: str) -> Answer:
        body = model.node(frame, viewer, params["node"])
        if body is None:
            return 404, {"message": f"no node {params['node']!r} in any pool"}
        readings, said = self._use()
        model.with_use([body], readings)
        return 200, {"generation": gen, **body, **said}

    def queues(self, params: Params, viewer: Viewer, gen: int, frame: Frame, at: str) -> Answer:
        points, _, _ = self.board.past()
        readings, said = self._use()
        if said:
            said["use"] = model.team_use(frame, readings)
        return 200, {"generation": gen, **model.queues(frame), "history": points, **said}

    def pending(self, params: Params, viewer: Viewer, gen: int, frame: Frame, at: str) -> Answer:
        team = params.get("team") or None
        return 200, {"generation": gen, **model.pending(frame, viewer, team)}

    def explain(self, params: Params, viewer: Viewer, gen: int, frame: Frame, at: str) -> Answer:
        workload = params.get("workload", "")
        lines = model.explain_lines(frame, viewer, workload)
        if lines is None:
            why = f"no pending workload {workload!r} of yours in the last cycle"
            return 404, {"message": why}
        return 200, {"generation": gen, "workload": workload, "explain": lines}

    def idle(self, params: Params, viewer: Viewer, gen: int, frame: Frame, at: str) -> Answer:
        _, _, hours = self.board.past()
        return 200, {
            "generation": gen,
            "now": model.idle_now(frame),
            "gpuHours": hours,
            "heldIdle": model.held_idle(frame, viewer),
        }

    def changes(self, params: Params, viewer: Viewer, gen: int, frame: Frame, at: str) -> Answer:
        events = []
        _, past, _ = self.board.past()
        for e in reversed(past):
            e = dict(e)
            hidden = [k for k in ("workload", "by") if k in e and not viewer.sees(e[k])]
            for k in hidden:
                e[k] = "(not yours to see)"
            if hidden:  # the message names both
                e["message"] = "(not yours to see)"
            events.append(e)
        return 200, {"generation": gen, **model.changes(frame), "events": events}


def _guarded(
    board: Board, access: Access, handler: Handler, cluster_wide: bool
) -> Callable[[Request], Response]:
    def endpoint(request: Request) -> Response:
        try:
            viewer = access.viewer(request.headers.get("authorization"))
        except Denied as denied:
            return _error(denied.status, str(denied))
        if cluster_wide and not viewer.cluster:
            return _error(
                403,
                f"user {viewer.name} may not list nodes; this page shows the whole cluster "
                "(grant list on nodes, e.g. a ClusterRole with nodes: list); the Pending page "
                "shows your namespaces",
            )
        got = board.latest()
        if got is None:
            return _error(503, "the scheduler has not finished a cycle yet; retry shortly")
        params = {**request.query_params, **request.path_params}
        status, body = handler(params, viewer, *got)
        return _json(body, status)

    return endpoint


def app(
    board: Board,
    access: Access,
    shadow: Shadow | None = None,
    gpu_use: GpuUseSource | None = None,
) -> Starlette:
    pages = Pages(board, shadow, gpu_use)

    def index(_: Request) -> Response:
        return FileResponse(STATIC / "index.html")

    api: list[tuple[str, Handler, bool]] = [
        ("/api/version", pages.version, False),
        ("/api/whoami", pages.whoami, False),
        ("/api/cluster", pages.cluster, True),
        ("/api/pools/{pool}", pages.pool, True),
        ("/api/nodes/{node}", pages.node, True),
        ("/api/queues", pages.queues, True),
        ("/api/pending", pages.pending, False),
        ("/api/explain", pages.explain, False),
        ("/api/idle", pages.idle, True),
        ("/api/changes", pages.changes, True),
        ("/api/shadow", pages.shadow, True),
    ]
    routes: list[Route | Mount] = [Route("/", index)]
    routes += [Route(path, _guarded(board, access, h, wide)) for path, h, wide in api]
    routes.append(Mount("/static", StaticFiles(directory=STATIC), name="static"))
    return Starlette(routes=routes, middleware=[Middleware(_Headers)])


class _Headers:
    """`HEADERS` on every answer: the page, its script and stylesheet, the API, errors."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in HEADERS.items():
                    headers[name] = value
            await send(message)

        await self.app(scope, receive, with_headers)
