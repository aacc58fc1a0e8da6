"""What every part of the local stack shares: its error, and free loopback ports."""

from __future__ import annotations

import contextlib
import socket

# the stack's static user for a scheduler (RBAC from the chart's roles, bound by tests)
SCHEDULER_USER = "gpucarve-scheduler"


class StackError(RuntimeError):
    pass


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """`count` distinct free loopback ports. The sockets stay open until all are chosen: asked
    one by one, the kernel may hand the same port out twice (etcd then fails to listen twice
    on it)."""
    with contextlib.ExitStack() as held:
        ports: list[int] = []
        for _ in range(count):
            sock = held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind(("127.0.0.1", 0))
            ports.append(int(sock.getsockname()[1]))
        return ports
