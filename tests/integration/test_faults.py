"""Faults on the real API server, with the invariants read back after each
(`tests/integration/invariants.py`): API errors and dropped connections injected by a proxy,
watches cut and expired (410, relist)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from gpucarve.config.policy_build import load_policy
from gpucarve.kube.nodes import node_manifests
from gpucarve.kube.stack import ADMIN_USER, LocalStack, find_binaries
from tests.integration.api import Api, wait_for
from tests.integration.fault_proxy import FaultProxy
from tests.integration.invariants import check_invariants
from tests.integration.kube_pods import create_pod, node_of, pod, pods_in

pytestmark = pytest.mark.integration

POLICY = """
apiVersion: gpucarve.io/v1alpha1
kind: Policy
metadata: {name: faults}
pools:
  - name: gpus
    gpuModel: H100-SXM5-80GB
    nodes: 40
    gpusPerNode: 8
    cpusPerNode: 192
    memoryGiBPerNode: 2048
    sharing: exclusive
    nodeLabels: {gpucarve.io/pool: gpus}
queues:
  - name: team
    namespaces: [team]
    quota:
      h100-full: {nominal: 320}
"""
LEASE_S = 3


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[LocalStack, Path]]:
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(POLICY)
    policy = load_policy(policy_file, []).policy
    assert policy is not None
    with LocalStack(find_binaries(), tmp_path / "kube", with_kwok=False) as st:
        api = _api(st)
        ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}
        api.create("/api/v1/namespaces", ns)
        nodes = node_manifests(policy)
        for n in nodes:
            n["status"]["conditions"] = [{"type": "Ready", "status": "True", "reason": "Test"}]
        with ThreadPoolExecutor(8) as ex:
            list(ex.map(lambda m: api.create("/api/v1/nodes", m), nodes))
        yield st, policy_file


def _api(stack: LocalStack) -> Api:
    return Api(stack.server, stack.tokens[ADMIN_USER])


def _scheduler(
    kubeconfig: Path, policy: Path, identity: str, log: Path, lease_s: int = LEASE_S
) -> subprocess.Popen[bytes]:
    args = [
        sys.executable, "-m", "gpucarve", "scheduler",
        "--policy", str(policy), "--kubeconfig", str(kubeconfig), "--identity", identity,
    ]  # fmt: skip
    args += ["--lease-duration", str(lease_s)] if lease_s else ["--no-leader-elect"]
    return subprocess.Popen(args, stdout=log.open("ab"), stderr=subprocess.STDOUT)


def _stop(*procs: subprocess.Popen[bytes]) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()


def _burst(api: Api, names: list[str], gangs: int = 0, tag: str = "g") -> set[str]:
    """Single-GPU pods, plus `gangs` gangs of four two-GPU pods (all-or-nothing)."""
    manifests = [pod("team", n, "nvidia.com/gpu") for n in names]
    for g in range(gangs):
        group = f"{tag}{g}"
        manifests += [
            pod("team", f"{group}-{i}", "nvidia.com/gpu", 2, group=group) for i in range(4)
        ]
    with ThreadPoolExecutor(8) as ex:
        list(ex.map(lambda m: create_pod(api, m), manifests))
    return {m["metadata"]["name"] for m in manifests}


def _bound(api: Api) -> int:
    return sum(1 for p in pods_in(api, "team").values() if node_of(p))


def _proxied_kubeconfig(stack: LocalStack, proxy: FaultProxy, path: Path) -> Path:
    config = json.loads(stack.kubeconfig().read_text())
    config["clusters"][0]["cluster"] = {"server": proxy.url}
    path.write_text(json.dumps(config))
    return path


def test_injected_api_errors_and_dropped_watches_converge_without_double_binding(
    stack: tuple[LocalStack, Path], tmp_path: Path
) -> None:
    st, policy = stack
    api = _api(st)
    rates = {"409": 0.04, "429": 0.04, "500": 0.04, "503": 0.04, "drop": 0.04}
    rates |= {"drop-after": 0.06, "cut-watch": 0.3, "410-watch": 0.3}
    opening = ("410-watch", "cut-watch", "410-watch")
    with FaultProxy(st.server, rates, seed=19, budget=400, first_watches=opening) as proxy:
        kubeconfig = _proxied_kubeconfig(st, proxy, tmp_path / "kubeconfig")
        # the default lease: a few failed renewals in a row must not cost the leadership
        sched = _scheduler(kubeconfig, policy, "faulty", tmp_path / "scheduler.log", 15)
        try:
            created = _burst(api, [f"p{i:03d}" for i in range(120)], gangs=6)
            wait_for(lambda: _bound(api) >= 60, timeout_s=120, what="the first pods bound")
            created |= _burst(api, [f"q{i:03d}" for i in range(100)], gangs=6, tag="h")
            total = len(created)
            wait_for(lambda: _bound(api) == total, timeout_s=240, what=f"all {total} bound")
            assert sched.poll() is None, "the scheduler stopped under the faults"
        finally:
            _stop(sched)
        counts = dict(proxy.counts)
    assert set(counts) == set(rates), f"not every fault was injected: {counts}"
    assert check_invariants(api, "team", created) == {"bound": total, "pending": 0}
