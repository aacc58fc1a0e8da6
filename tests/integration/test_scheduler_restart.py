"""The scheduler as a process: killed with SIGKILL in the middle of a burst of 500 pods and
started again, it binds every pod once and never hands a GPU out twice; of two replicas only
the Lease holder schedules, and the other takes over when it goes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from gpucarve.config.policy_build import load_policy
from gpucarve.devcluster.nodes import node_manifests
from gpucarve.devcluster.stack import ADMIN_USER, LocalStack, find_binaries
from tests.integration.api import Api, wait_for
from tests.integration.kube_pods import create_pod, node_of, pod, pods_in

pytestmark = pytest.mark.integration

POLICY = """
apiVersion: gpucarve.io/v1alpha1
kind: Policy
metadata: {name: burst}
pools:
  - name: gpus
    gpuModel: H100-SXM5-80GB
    nodes: 64
    gpusPerNode: 8
    cpusPerNode: 192
    memoryGiBPerNode: 2048
    sharing: exclusive
    nodeLabels: {gpucarve.io/pool: gpus}
queues:
  - name: team
    namespaces: [team]
    quota:
      h100-full: {nominal: 512}
"""


@pytest.fixture(scope="module")
def burst(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalStack, Path]]:
    work = tmp_path_factory.mktemp("burst")
    policy_file = work / "policy.yaml"
    policy_file.write_text(POLICY)
    policy = load_policy(policy_file, []).policy
    with LocalStack(find_binaries(), work / "kube", policy_file) as stack:
        api = Api(stack.server, stack.tokens[ADMIN_USER])
        with ThreadPoolExecutor(8) as ex:
            list(ex.map(lambda m: api.create("/api/v1/nodes", m), node_manifests(policy)))
        yield stack, policy_file


def _start(stack: LocalStack, policy: Path, identity: str, log: Path) -> subprocess.Popen[bytes]:
    args = [
        sys.executable, "-m", "gpucarve", "scheduler",
        "--policy", str(policy),
        "--kubeconfig", str(stack.kubeconfig()),
        "--identity", identity,
        "--lease-duration", "3",
    ]  # fmt: skip
    return subprocess.Popen(args, stdout=log.open("ab"), stderr=subprocess.STDOUT)


def _bound(api: Api) -> dict[str, dict[str, object]]:
    return {n: p for n, p in pods_in(api, "team").items() if node_of(p)}


def _create(api: Api, names: list[str]) -> None:
    with ThreadPoolExecutor(8) as ex:
        list(ex.map(lambda n: create_pod(api, pod("team", n, "nvidia.com/gpu")), names))


def test_kill_9_during_a_burst_binds_every_pod_once(
    burst: tuple[LocalStack, Path], tmp_path: Path
) -> None:
    stack, policy = burst
    api = Api(stack.server, stack.tokens[ADMIN_USER])
    log = tmp_path / "scheduler.log"
    first = _start(stack, policy, "first", log)
    try:
        names = [f"p{i:03d}" for i in range(500)]
        _create(api, names[:150])
        wait_for(lambda: len(_bound(api)) >= 50, what="the first pods bound")
        os.kill(first.pid, signal.SIGKILL)
        first.wait(10)
        killed_at = len(_bound(api))
        _create(api, names[150:])
        second = _start(stack, policy, "second", log)
        try:
            wait_for(lambda: len(_bound(api)) == 500, timeout_s=180, what="all 500 bound")
        finally:
            second.send_signal(signal.SIGTERM)
            second.wait(20)
    finally:
        if first.poll() is None:
            first.kill()
    pods = pods_in(api, "team")
    assert killed_at < 500, "the kill came after the burst: nothing was tested"
    slices: Counter[str] = Counter()
    per_node: Counter[str] = Counter()
    for p in pods.values():
        node = node_of(p)
        assert node is not None
        (sid,) = json.loads(p["metadata"]["annotations"]["gpucarve.io/assignment"])["slices"]
        assert sid.startswith(node + "/gpu")
        slices[sid] += 1
        per_node[node] += 1
    assert len(pods) == 500
    assert max(slices.values()) == 1, [s for s, n in slices.items() if n > 1]
    assert max(per_node.values()) <= 8
    assert "second is the leader" in log.read_text()


def test_two_replicas_one_leader(burst: tuple[LocalStack, Path], tmp_path: Path) -> None:
    stack, policy = burst
    api = Api(stack.server, stack.tokens[ADMIN_USER])
    for name in list(pods_in(api, "team")):
        api.call("DELETE", f"/api/v1/namespaces/team/pods/{name}?gracePeriodSeconds=0")
    logs = {who: tmp_path / f"{who}.log" for who in ("a", "b")}
    procs = {who: _start(stack, policy, who, logs[who]) for who in logs}
    try:
        lease = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/gpucarve-scheduler"

        def holder() -> str | None:
            status, body = api.call("GET", lease)
            who = body["spec"].get("holderIdentity") if status == 200 else None
            return who if who in logs else None

        leader = wait_for(holder, what="a leader")
        other = "b" if leader == "a" else "a"
        _create(api, [f"q{i:02d}" for i in range(40)])
        wait_for(lambda: len(_bound(api)) == 40, what="40 bound")
        time.sleep(1)
        assert "pods bound" in logs[leader].read_text()
        assert "pods bound" not in logs[other].read_text()
        assert "is the leader" not in logs[other].read_text()

        procs[leader].send_signal(signal.SIGTERM)  # gives the Lease up
        procs[leader].wait(20)
        wait_for(lambda: holder() == other, what="the standby to take over")
        _create(api, [f"r{i:02d}" for i in range(10)])
        wait_for(lambda: len(_bound(api)) == 50, what="50 bound")
        assert "pods bound" in logs[other].read_text()
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.wait(20)
