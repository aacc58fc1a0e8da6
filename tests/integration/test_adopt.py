"""`gpucarve adopt` against the real API server: a cluster shaped like a GPU Operator cluster
(nodes as GFD and the device plugin describe them, ResourceQuotas, a PriorityClass) is read
into a policy that validates and reproduces its pools, MIG layouts and quotas; nothing in the
cluster changes."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpucarve.cli.main import app
from gpucarve.config.examples import POLICY, example_path
from gpucarve.config.policy_build import load_policy
from gpucarve.devcluster.nodes import node_manifests, slice_manifests
from gpucarve.devcluster.stack import ADMIN_USER, LocalStack, find_binaries
from tests.integration.api import Api

pytestmark = pytest.mark.integration


def test_adopt_reads_the_cluster_into_a_policy_that_validates(tmp_path: Path) -> None:
    example = load_policy(example_path(POLICY)).policy
    # adopt reads a cluster gpucarve does not govern yet: no webhook of its own runs there
    off = {"webhook": "adopt reads a cluster before gpucarve is installed on it"}
    with LocalStack(find_binaries(), tmp_path / "stack", off=off) as stack:
        api = Api(stack.server, stack.tokens[ADMIN_USER])
        for m in node_manifests(example):
            m["metadata"]["labels"].pop("gpucarve.io/pool", None)  # not gpucarve's cluster
            api.create("/api/v1/nodes", m)
        for ns in ("research", "serving"):
            api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                              "metadata": {"name": ns}})  # fmt: skip
        hard = {"research": {"requests.nvidia.com/gpu": "16"},
                "serving": {"requests.nvidia.com/mig-3g.40gb": "12"}}  # fmt: skip
        for ns, h in hard.items():
            api.create(f"/api/v1/namespaces/{ns}/resourcequotas",
                       {"apiVersion": "v1", "kind": "ResourceQuota",
                        "metadata": {"name": "gpus"}, "spec": {"hard": h}})  # fmt: skip
        api.create("/apis/scheduling.k8s.io/v1/priorityclasses",
                   {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                    "metadata": {"name": "serving-critical"}, "value": 100000})  # fmt: skip
        before = api.get("/api/v1/nodes")["items"]
        out = tmp_path / "adopted.yaml"
        result = CliRunner().invoke(
            app, ["adopt", "--kubeconfig", str(stack.kubeconfig()), "--out", str(out)]
        )
        assert result.exit_code == 0, result.output
        after = api.get("/api/v1/nodes")["items"]
    assert [n["metadata"]["resourceVersion"] for n in after] == [
        n["metadata"]["resourceVersion"] for n in before
    ], "adopt changed a node"
    adopted = load_policy(out).policy  # it validates
    by_model = {p.model.id: p for p in adopted.pools}
    for original in example.pools:
        got = by_model[original.model.id]
        want = (original.nodes, original.gpus_per_node, original.sharing, original.replicas)
        assert (got.nodes, got.gpus_per_node, got.sharing, got.replicas) == want
        assert got.mig_layouts == original.mig_layouts
    quotas = {q.name: {x.flavor: x.nominal for x in q.quotas} for q in adopted.queues}
    assert quotas == {"research": {"h100-full": 16}, "serving": {"a100-mig-3g.40gb": 12}}
    assert [c.name for c in adopted.priority_classes] == ["serving-critical"]
    doc = yaml.safe_load(out.read_text())
    assert doc["metadata"]["name"] == "adopted"
    assert "pool h100-exclusive: 4 nodes" in result.output


def test_adopt_reads_dra_nodes_and_a_gpu_quota_over_several_models(tmp_path: Path) -> None:
    """The DRA example's cluster: its DRA nodes publish no GPU resource, only ResourceSlices;
    `nvidia.com/gpu` comes from one device-plugin pool here, and a second model's device-plugin
    nodes are added so that a quota on it spans two models."""
    from tests.paths import EXAMPLES

    dra = load_policy(EXAMPLES / "dra" / "policy.yaml").policy
    off = {"webhook": "adopt reads a cluster before gpucarve is installed on it"}
    with LocalStack(find_binaries(), tmp_path / "stack", off=off) as stack:
        api = Api(stack.server, stack.tokens[ADMIN_USER])
        example = load_policy(example_path(POLICY)).policy
        h100s = [m for m in node_manifests(example) if m["metadata"]["name"].startswith("train")]
        for m in [*node_manifests(dra), *h100s]:
            m["metadata"]["labels"].pop("gpucarve.io/pool", None)
            api.create("/api/v1/nodes", m)
        for m in slice_manifests(dra):
            api.create("/apis/resource.k8s.io/v1/resourceslices", m)
        api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                          "metadata": {"name": "research"}})  # fmt: skip
        api.create("/api/v1/namespaces/research/resourcequotas",
                   {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpus"},
                    "spec": {"hard": {"requests.nvidia.com/gpu": "10"}}})  # fmt: skip
        out = tmp_path / "adopted.yaml"
        result = CliRunner().invoke(
            app, ["adopt", "--kubeconfig", str(stack.kubeconfig()), "--out", str(out)]
        )
        assert result.exit_code == 0, result.output
    assert "Problem(" not in result.output
    adopted = load_policy(out).policy
    kinds = sorted((p.model.id, p.sharing.value, p.devices.value) for p in adopted.pools)
    assert ("H100-SXM5-80GB", "exclusive", "dra") in kinds
    assert ("A100-80GB", "mig", "dra") in kinds
    assert ("L40S", "time-slicing", "dra") in kinds
    assert ("A100-80GB", "exclusive", "device-plugin") in kinds
    (queue,) = adopted.queues
    assert sum(q.nominal for q in queue.quotas) == 10
    assert "split by the pools' capacity" in result.output
