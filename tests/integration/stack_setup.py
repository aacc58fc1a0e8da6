"""Shared set-up for the scheduler's integration tests: a stack with a policy's namespaces,
nodes and queues, and a scheduler running in a thread."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from typer.testing import CliRunner

from gpucarve.cli.main import app
from gpucarve.config.policy_build import load_policy
from gpucarve.kube.nodes import node_manifests
from gpucarve.kube.scheduler import Scheduler
from gpucarve.kube.stack import LocalStack
from tests.integration.api import Api


def populate(stack: LocalStack, api: Api, policy_file: Path, namespaces: Iterable[str]) -> None:
    """The namespaces, the policy's nodes, and its queues and priority classes (`apply`)."""
    for ns in namespaces:
        api.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
        )
    for m in node_manifests(load_policy(policy_file, []).policy):
        api.create("/api/v1/nodes", m)
    args = ["apply", "--policy", str(policy_file), "--kubeconfig", str(stack.kubeconfig())]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output


@contextmanager
def running(sched: Scheduler) -> Iterator[Scheduler]:
    """The scheduler's loop in a thread, stopped (and its client closed) on the way out."""
    stop = threading.Event()
    thread = threading.Thread(target=sched.run, args=(stop,), daemon=True)
    thread.start()
    try:
        yield sched
    finally:
        stop.set()
        thread.join(10)
        sched.stop()
