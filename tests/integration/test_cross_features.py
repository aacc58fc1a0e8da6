"""Features that must not break each other, in the stack as shipped (both webhooks, the
controllers, kube-scheduler): in one namespace a gpucarve fraction, a DRA claim and plain GPU
pods, one of them preferring another model's nodes, written as a user writes them (no
schedulerName). The same scenario through `plan` places each workload on the same pool."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpucarve.cli.main import app
from gpucarve.devcluster.stack import LocalStack
from tests.integration import dra_objects as dra
from tests.integration.api import Api, wait_for
from tests.integration.kube_pods import node_of, pod, pods_in
from tests.integration.stack_setup import populated, scheduling

pytestmark = pytest.mark.integration
NS = "research"
PRODUCT = "nvidia.com/gpu.product"
POLICY: dict[str, Any] = {
    "apiVersion": "gpucarve.io/v1alpha1",
    "kind": "Policy",
    "metadata": {"name": "mixed"},
    "pools": [
        {"name": "h100", "gpuModel": "H100-SXM5-80GB", "nodes": 1, "gpusPerNode": 8,
         "sharing": "exclusive", "devices": "dra"},
        {"name": "a100", "gpuModel": "A100-80GB", "nodes": 1, "gpusPerNode": 8,
         "sharing": "exclusive"},
        {"name": "l40s", "gpuModel": "L40S", "nodes": 1, "gpusPerNode": 2,
         "sharing": "time-slicing", "replicas": 4},
        {"name": "l4", "gpuModel": "L4", "nodes": 1, "gpusPerNode": 2, "sharing": "exclusive"},
    ],
    "queues": [
        {"name": "research", "namespaces": [NS],
         "quota": {"h100-dra-full": {"nominal": 8}, "a100-full": {"nominal": 8},
                   "l40s-shared": {"nominal": 8}, "l4-full": {"nominal": 2}}},
    ],
    "scheduling": {"minRuntimeSeconds": 0},
}  # fmt: skip
L4_NODES = [{"key": PRODUCT, "operator": "In", "values": ["NVIDIA-L4"]}]
# as a pod writes the preference, and as a workload file does
PREFER_L4 = [{"weight": 80, "preference": {"matchExpressions": L4_NODES}}]
PREFER_L4_FILE = [{"weight": 80, "preference": L4_NODES}]
# name -> the pool it must land on, on both paths
WHERE = {"packed": "a100", "prefers-l4": "l4", "fraction": "l40s", "claimed": "h100"}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[LocalStack, Api, Path]]:
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(yaml.safe_dump(POLICY))
    with populated(tmp_path, policy_file, [NS]) as both:
        yield both


def _as_users_write_them() -> dict[str, dict[str, Any]]:
    packed = pod(NS, "packed", "nvidia.com/gpu", 7)
    packed["spec"]["nodeSelector"] = {PRODUCT: "NVIDIA-A100-SXM4-80GB"}
    prefers = pod(NS, "prefers-l4", "nvidia.com/gpu", 1)
    prefers["spec"]["affinity"] = {
        "nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": PREFER_L4}
    }
    fraction = pod(NS, "fraction", "nvidia.com/gpu.shared", 1)
    del fraction["spec"]["containers"][0]["resources"]
    fraction["metadata"]["annotations"] = {"gpucarve.io/gpu-fraction": "250"}
    claimed = dra.pod("claimed", template="one-h100")
    out = {"packed": packed, "prefers-l4": prefers, "fraction": fraction, "claimed": claimed}
    for p in out.values():
        p["spec"].pop("schedulerName", None)  # the webhook sets it
    return out


def test_a_fraction_a_claim_and_plain_pods_in_one_namespace_land_as_plan_places_them(
    cluster: tuple[LocalStack, Api, Path], tmp_path: Path
) -> None:
    stack, api, policy_file = cluster
    one_h100 = dra.claim_spec([{"deviceClassName": "gpu.nvidia.com"}])
    template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                "metadata": {"name": "one-h100", "namespace": NS},
                "spec": {"spec": one_h100}}  # fmt: skip
    api.create(f"{dra.RESOURCE}/namespaces/{NS}/resourceclaimtemplates", template)
    pods = _as_users_write_them()
    with scheduling(stack, policy_file):
        api.create(f"/api/v1/namespaces/{NS}/pods", pods["packed"])
        wait_for(lambda: node_of(pods_in(api, NS).get("packed") or {}), what="the packed pod")
        for name in ("prefers-l4", "fraction", "claimed"):
            made = api.create(f"/api/v1/namespaces/{NS}/pods", pods[name])
            assert made["spec"]["schedulerName"] == "gpucarve", made["spec"]

        def all_bound() -> dict[str, str] | None:
            got = {n: node_of(pods_in(api, NS).get(n) or {}) for n in WHERE}
            return None if not all(got.values()) else {n: str(v) for n, v in got.items()}

        nodes = wait_for(all_bound, what="every pod bound")
    assert {n: v.rsplit("-", 1)[0] for n, v in nodes.items()} == WHERE
    # the fraction's GPU reaches it through gpucarve's device ConfigMap; the claim's through
    # its allocation; neither got the other's machinery
    made = pods_in(api, NS)
    assert made["fraction"]["metadata"]["annotations"]["gpucarve.io/device-config"]
    assert "gpucarve.io/device-config" not in made["claimed"]["metadata"].get("annotations", {})
    assert dra.claim_of(api, "claimed") is not None
    # the same scenario through `plan`
    assert _planned(policy_file, tmp_path) == WHERE


def _planned(policy_file: Path, tmp: Path) -> dict[str, str]:
    one = {"count": 1}
    workloads = [
        {"name": "packed", "namespace": NS, "podSets": [{
            **one, "resources": {"limits": {"nvidia.com/gpu": 7}},
            "nodeSelector": {PRODUCT: "NVIDIA-A100-SXM4-80GB"}}]},
        {"name": "prefers-l4", "namespace": NS, "submitTime": 1, "podSets": [{
            **one, "resources": {"limits": {"nvidia.com/gpu": 1}},
            "preferredAffinity": PREFER_L4_FILE}]},
        {"name": "fraction", "namespace": NS, "submitTime": 2, "podSets": [{
            **one, "annotations": {"gpucarve.io/gpu-fraction": "250"}}]},
        {"name": "claimed", "namespace": NS, "submitTime": 3, "podSets": [{
            **one, "deviceClaims": [{"deviceClassName": "gpu.nvidia.com"}]}]},
    ]  # fmt: skip
    path = tmp / "workloads.yaml"
    path.write_text(yaml.safe_dump({"workloads": workloads}))
    result = CliRunner().invoke(app, ["plan", str(policy_file), str(path), "--json"])
    assert result.exit_code == 0, result.output
    doc = yaml.safe_load(result.stdout)
    out = {}
    for a in doc["admissions"]:
        name = a["workload"].split("/", 1)[1]
        out[name] = a["pods"][0]["node"].rsplit("-", 1)[0]
    return out
