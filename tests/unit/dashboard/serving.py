"""A dashboard served over real HTTP for the page tests (Starlette on uvicorn, a free port)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from gpucarve.dashboard.access import Access, Open
from gpucarve.dashboard.server import Board, Shadow, app
from gpucarve.kube.scheduler.health import ThreadServer


@contextmanager
def serving(
    board: Board, access: Access | None = None, shadow: Shadow | None = None
) -> Iterator[str]:
    """The dashboard of `board` while the block runs; its base URL."""
    server = ThreadServer(app(board, access or Open(), shadow), "127.0.0.1", 0, "dashboard")
    server.start()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.stop()
