"""Who may read a scheduler's /history (`--history-auth kube`, the default and the chart's):
the API server reviews each request's bearer token; a user who may list nodes exports every
workload, one who may list pods in one namespace only that namespace's, and a request with no
token is refused with the fix. The scheduler runs as a process on the stack as shipped."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpucarve.cli.main import app
from gpucarve.devcluster.procs import free_port
from gpucarve.devcluster.stack import ADMIN_USER, LocalStack
from tests.integration.api import Api, probe_ready, wait_for
from tests.integration.kube_pods import create_pod, node_of, pod, pods_in
from tests.integration.stack_setup import example_policy, namespace_reader, populated

pytestmark = pytest.mark.integration
TEAMS = ["research", "data-science"]


def _export(url: str, *creds: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["history", "export", "--url", url, *creds])
    return result.exit_code, result.output


def _namespaces(text: str) -> set[str]:
    return {json.loads(x)["namespace"] for x in text.splitlines() if x.strip()}


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, LocalStack, Api]]:
    """A scheduler process recording one pod in research and one in data science."""
    work = tmp_path_factory.mktemp("access")
    policy_file = example_policy(work)
    with populated(work, policy_file, TEAMS) as (stack, api, _):
        port = free_port()
        args = [
            sys.executable, "-m", "gpucarve", "scheduler", "--policy", str(policy_file),
            "--kubeconfig", str(stack.kubeconfig()), "--no-leader-elect",
            "--history-dir", str(work / "history"), "--health-port", str(port),
            "--health-host", "127.0.0.1",
        ]  # fmt: skip
        log = work / "scheduler.log"
        proc = subprocess.Popen(args, stdout=log.open("wb"), stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        try:
            wait_for(lambda: probe_ready(url), timeout_s=60, what="the scheduler to be ready")
            for ns in TEAMS:
                create_pod(api, pod(ns, "one", "nvidia.com/gpu", 1))
            wait_for(lambda: all(node_of(pods_in(api, ns)["one"]) for ns in TEAMS),
                     what="both pods bound")  # fmt: skip
            yield url, stack, api
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)


def test_a_request_without_a_token_is_refused_with_the_fix(
    recording: tuple[str, LocalStack, Any],
) -> None:
    url, _, _ = recording
    code, said = _export(url)
    assert code == 2, said
    assert "--url [not-allowed]" in said and "(401)" in said and "--kubeconfig" in said


def test_a_cluster_reader_exports_every_workload_a_namespace_reader_only_its_own(
    recording: tuple[str, LocalStack, Api], tmp_path: Path
) -> None:
    url, stack, api = recording
    admin = ["--kubeconfig", str(stack.kubeconfig(ADMIN_USER))]
    text = wait_for(lambda: (r := _export(url, *admin)) and len(_namespaces(r[1])) == 2 and r[1],
                    what="both workloads in the history")  # fmt: skip
    assert _namespaces(text) == set(TEAMS)
    token = tmp_path / "alice.token"
    token.write_text(namespace_reader(api, "research") + "\n")
    code, said = _export(url, "--token-file", str(token))
    assert code == 0, said
    assert _namespaces(said) == {"research"}
    junk = tmp_path / "junk.token"
    junk.write_text("not-a-token")
    code, said = _export(url, "--token-file", str(junk))
    assert code == 2 and "(401)" in said, said
