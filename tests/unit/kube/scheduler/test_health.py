"""The scheduler's probes: alive while its loop beats, ready as a synced leader or a standby,
served over real HTTP (Starlette on uvicorn)."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request

import pytest

from gpucarve.devcluster.procs import free_port
from gpucarve.kube.scheduler.health import Health, ProbeServer


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_alive_while_the_loop_beats_and_ready_by_role() -> None:
    clock = Clock()
    h = Health(stale_after_s=10, clock=clock, leader=False)
    assert not h.alive()  # never beat
    h.beat()
    assert h.alive() and h.ready()  # a standby is ready to take over
    h.leader = True
    assert not h.ready()  # a leader is ready once its informers have listed
    h.synced = True
    assert h.ready()
    clock.t = 10.5
    assert not h.alive()
    assert Health(leader=None, synced=False).ready() is False


def _get(port: int, path: str) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_the_probes_answer_over_http() -> None:
    clock = Clock()
    h = Health(stale_after_s=5, clock=clock, leader=True)
    h.beat()
    port = free_port()
    server = ProbeServer(h, "127.0.0.1", port)
    server.start()
    try:
        assert _get(port, "/healthz")[0] == 200
        status, body = _get(port, "/readyz")
        assert status == 503 and body["leader"] is True and body["synced"] is False
        h.synced = True
        assert _get(port, "/readyz") == (
            200, {"alive": True, "ready": True, "leader": True, "synced": True})  # fmt: skip
        clock.t = 6
        assert _get(port, "/healthz")[0] == 503
        assert _get(port, "/readyz")[0] == 503
    finally:
        server.stop()


def test_a_taken_port_is_an_error_not_a_hang() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        server = ProbeServer(Health(), "127.0.0.1", s.getsockname()[1])
        with pytest.raises(OSError, match=r"cannot listen on 127\.0\.0\.1:.*in use"):
            server.start(timeout_s=5)
