"""The scheduler's process (`kube/scheduler/process.py`): a port it cannot listen on is said
before anything is led, naming the flag, and what was started is stopped."""

from __future__ import annotations

import signal
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpucarve.core.policy import Policy
from gpucarve.kube.api.client import Client
from gpucarve.kube.scheduler.process import Dashboard, PortTaken, ProcessSettings, run_process
from tests.engine.builders import mixed_policy

NOWHERE = Client("https://127.0.0.1:9", ssl.create_default_context(), {}, timeout_s=0.5)


@pytest.fixture
def taken() -> Iterator[int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    handlers = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    try:
        yield int(sock.getsockname()[1])
    finally:
        sock.close()
        signal.signal(signal.SIGTERM, handlers[0])
        signal.signal(signal.SIGINT, handlers[1])


def _policy() -> Policy:
    return mixed_policy()


def test_a_taken_health_port_is_refused_naming_the_flag(taken: int, tmp_path: Path) -> None:
    settings = ProcessSettings(tmp_path / "policy.yaml", None, health_host="127.0.0.1",
                               health_port=taken, leader_elect=False)  # fmt: skip
    with pytest.raises(PortTaken) as raised:
        run_process(NOWHERE, _policy(), settings)
    assert raised.value.flag == "--health-port" and str(taken) in str(raised.value)


def test_a_taken_dashboard_port_stops_the_probes_it_started(taken: int, tmp_path: Path) -> None:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        health_port = int(free.getsockname()[1])
    settings = ProcessSettings(tmp_path / "policy.yaml", None, health_host="127.0.0.1",
                               health_port=health_port, leader_elect=False)  # fmt: skip

    def dashboard() -> Dashboard | None:
        raise PortTaken("--dashboard-port", taken, OSError(98, "Address already in use"))

    with pytest.raises(PortTaken) as raised:
        run_process(NOWHERE, _policy(), settings, dashboard)
    assert raised.value.flag == "--dashboard-port"
    # the probe server it had started is stopped: its port is free again
    with socket.socket() as again:
        again.bind(("127.0.0.1", health_port))
