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


def test_the_history_answers_whom_its_guard_lets_read_and_only_their_namespaces() -> None:
    from gpucarve.kube.scheduler.health import HistoryDenied

    asked: list[tuple[int | None, frozenset[str] | None]] = []

    def feed(since: int | None, namespaces: frozenset[str] | None) -> str:
        asked.append((since, namespaces))
        return '{"namespace": "a"}\n'

    def guard(authorization: str | None) -> frozenset[str] | None:
        if authorization is None:
            raise HistoryDenied(401, "sign in with a bearer token the API server accepts")
        if authorization == "Bearer down":
            raise HistoryDenied(503, "the API server could not review the token")
        return None if authorization == "Bearer admin" else frozenset({"a"})

    port = free_port()
    server = ProbeServer(Health(), "127.0.0.1", port, None, feed, guard)
    server.start()
    try:

        def get(token: str | None) -> tuple[int, str, str | None]:
            req = urllib.request.Request(f"http://127.0.0.1:{port}/history?since=5")
            if token is not None:
                req.add_header("Authorization", f"Bearer {token}")
            try:
                with urllib.request.urlopen(req, timeout=5) as reply:
                    return reply.status, reply.read().decode(), None
            except urllib.error.HTTPError as err:
                return err.code, err.read().decode(), err.headers.get("WWW-Authenticate")

        status, body, challenge = get(None)
        assert (status, challenge) == (401, "Bearer") and "bearer token" in body
        assert get("down")[0] == 503
        assert asked == []  # refused before the history is read
        assert get("admin")[:2] == (200, '{"namespace": "a"}\n')
        assert get("alice")[0] == 200
        assert asked == [(5, None), (5, frozenset({"a"}))]
    finally:
        server.stop()
