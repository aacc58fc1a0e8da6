"""The fragmentation model keeps the only 128-CPU node whole on a real API server, as the engine
does (tests/engine/test_whole_node_room.py): two small 1-GPU pods, pending together when the
scheduler starts, bind to a 96-CPU node, and `gpucarve plan` on the same workloads places them
alike."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpucarve.devcluster.stack import ADMIN_USER, LocalStack, find_binaries
from tests.integration.api import Api, wait_for
from tests.integration.kube_pods import create_pod, node_of, pod, pods_in
from tests.integration.stack_setup import policy_in, populate, scheduling
from tests.integration.test_parity import gang, plan

pytestmark = pytest.mark.integration

POLICY = """
apiVersion: gpucarve.io/v1alpha1
kind: Policy
metadata: {name: whole-node-room}
pools:
  - {name: big, gpuModel: H100-SXM5-80GB, nodes: 1, gpusPerNode: 8, sharing: exclusive,
     cpusPerNode: 128, memoryGiBPerNode: 1024}
  - {name: std, gpuModel: H100-SXM5-80GB, nodes: 3, gpusPerNode: 8, sharing: exclusive,
     cpusPerNode: 96, memoryGiBPerNode: 1024}
queues:
  - name: research
    namespaces: [research]
    quota: {h100-full: {nominal: 32}}
"""
PODS = (("light", "2"), ("heavy", "24"))  # (name, CPUs), created in this order


@pytest.fixture(scope="module")
def policy_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return policy_in(tmp_path_factory, POLICY)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, policy_file: Path) -> Iterator[LocalStack]:
    with LocalStack(find_binaries(), tmp_path_factory.mktemp("room"), policy_file) as s:
        populate(s, Api(s.server, s.tokens[ADMIN_USER]), policy_file, ["research"])
        yield s


def _workload(name: str, cpu: str, submit: int) -> dict[str, Any]:
    w = gang(name, 1, 1, submit)
    w["podSets"][0]["resources"]["requests"]["cpu"] = cpu
    return w


def test_small_pods_leave_the_only_big_node_whole_on_both_paths(
    stack: LocalStack, policy_file: Path, tmp_path: Path
) -> None:
    api = Api(stack.server, stack.tokens[ADMIN_USER])
    for name, cpu in PODS:  # both pending before the scheduler's first cycle
        create_pod(api, pod("research", name, "nvidia.com/gpu", cpu=cpu))

    def bound() -> dict[str, str] | None:
        pods = pods_in(api, "research")
        nodes = {name: node_of(pods.get(name) or {}) for name, _ in PODS}
        return None if not all(nodes.values()) else {k: v for k, v in nodes.items() if v}

    with scheduling(stack, policy_file):
        on = wait_for(bound, what="both pods bound")
    planned = plan(policy_file, [_workload(n, c, k) for k, (n, c) in enumerate(PODS)], tmp_path)
    placed = {a["workload"]: a["pods"][0]["node"] for a in planned["admissions"]}
    assert placed == {f"research/{n}": node for n, node in on.items()}
    assert on == {"light": "std-0", "heavy": "std-0"}
