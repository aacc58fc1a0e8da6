"""GPU-model constraints steer the fragmentation model the same way on both paths: with work
pinned to one model (a nodeSelector on the GPU Feature Discovery product label) running, an
unpinned pod goes to the other model and leaves the pinned model's GPUs to the work that can
use nothing else; unpinned, it packs beside the first. The scheduler on a real API server and
`gpucarve plan` on the same workloads place alike."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpucarve.devcluster.stack import ADMIN_USER, LocalStack, find_binaries
from tests.integration.api import Api, wait_for
from tests.integration.kube_pods import create_pod, delete_all, node_of, pod, pods_in
from tests.integration.stack_setup import policy_in, populate, scheduling
from tests.integration.test_parity import gang, plan

pytestmark = pytest.mark.integration

POLICY = """
apiVersion: gpucarve.io/v1alpha1
kind: Policy
metadata: {name: two-models}
pools:
  - name: h100
    gpuModel: H100-SXM5-80GB
    nodes: 1
    gpusPerNode: 8
    sharing: exclusive
  - name: a100
    gpuModel: A100-80GB
    nodes: 1
    gpusPerNode: 8
    sharing: exclusive
queues:
  - name: research
    namespaces: [research]
    quota:
      h100-full: {nominal: 8}
      a100-full: {nominal: 8}
"""
PRODUCT = "nvidia.com/gpu.product"
A100, H100 = "NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3"


@pytest.fixture(scope="module")
def policy_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return policy_in(tmp_path_factory, POLICY)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, policy_file: Path) -> Iterator[Api]:
    with LocalStack(find_binaries(), tmp_path_factory.mktemp("models"), policy_file) as stack:
        api = Api(stack.server, stack.tokens[ADMIN_USER])
        populate(stack, api, policy_file, ["research"])
        with scheduling(stack, policy_file):
            yield api


def _pinned(name: str, product: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The pod, and the same as a `plan` workload."""
    manifest = pod("research", name, "nvidia.com/gpu")
    workload = gang(name, 1, 1, 0)
    if product is not None:
        manifest["spec"]["nodeSelector"] = {PRODUCT: product}
        workload["podSets"][0]["nodeSelector"] = {PRODUCT: product}
    return manifest, workload


@pytest.mark.parametrize(
    ("product", "free_on"),
    [(A100, "h100-0"), (H100, "a100-0"), (None, "h100-0")],
    ids=["pinned-to-a100", "pinned-to-h100", "unpinned"],
)
def test_unpinned_work_leaves_the_pinned_model_alone_on_both_paths(
    cluster: Api, policy_file: Path, tmp_path: Path, product: str | None, free_on: str
) -> None:
    api = cluster
    first, first_w = _pinned("pinned", product)
    second, second_w = _pinned("free", None)
    second_w["submitTime"] = 1
    bound: dict[str, str] = {}
    try:
        for m in (first, second):
            create_pod(api, m)
            name = m["metadata"]["name"]
            bound[name] = wait_for(lambda n=name: node_of(pods_in(api, "research").get(n) or {}),
                                   what=f"{name} bound")  # fmt: skip
    finally:
        delete_all(api, ["research"])
        wait_for(lambda: not pods_in(api, "research"), what="pods deleted")
    planned = plan(policy_file, [first_w, second_w], tmp_path)
    placed = {a["workload"]: a["pods"][0]["node"] for a in planned["admissions"]}
    assert placed == {f"research/{n}": node for n, node in bound.items()}
    assert bound["free"] == free_on
    if product is None:
        assert bound["free"] == bound["pinned"]  # packed: the flip above is the constraint's
