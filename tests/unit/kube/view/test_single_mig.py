"""The single MIG strategy: a pool whose instances the device plugin publishes as
`nvidia.com/gpu` is validated, rendered, recognised on its nodes and served by whole-GPU
requests; a node whose strategy disagrees with its pool is reported with the fix."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpucarve.config.catalog_file import packaged_catalog
from gpucarve.config.policy_build import build_policy
from gpucarve.config.workload_spec import build_workload
from gpucarve.core.cluster import build_cluster
from gpucarve.core.problems import InvalidInput
from gpucarve.core.snapshot import Snapshot
from gpucarve.devcluster.nodes import node_manifests
from gpucarve.engine import run_cycle
from gpucarve.kube.view.nodes.inventory import build_inventory
from gpucarve.render.nvidia import device_plugin_configs


def doc(strategy: str = "single", layout: dict[str, int] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "gpucarve.io/v1alpha1",
        "kind": "Policy",
        "metadata": {"name": "single"},
        "pools": [
            {
                "name": "inf",
                "gpuModel": "A100-80GB",
                "nodes": 2,
                "gpusPerNode": 1,
                "sharing": "mig",
                "mig": {"layout": layout or {"1g.10gb": 7}, "strategy": strategy},
            }
        ],
        "queues": [
            {
                "name": "serving",
                "namespaces": ["serving"],
                "quota": {"a100-mig-1g.10gb": {"nominal": 14}},
            }
        ],
    }


def _ready(manifests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = copy.deepcopy(manifests)
    for m in out:
        m["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    return out


def test_single_pool_publishes_instances_as_gpus() -> None:
    policy = build_policy(doc(), packaged_catalog()).policy
    (flavor,) = policy.flavors.values()
    assert flavor.name == "a100-mig-1g.10gb" and flavor.resource_name == "nvidia.com/gpu"
    node = node_manifests(policy)[0]
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "7"
    assert not any(k.startswith("nvidia.com/mig-") for k in node["status"]["allocatable"])
    labels = node["metadata"]["labels"]
    assert labels["nvidia.com/mig.strategy"] == "single"
    assert labels["nvidia.com/gpu.product"].endswith("-MIG-1g.10gb")
    assert (labels["nvidia.com/gpu.count"], labels["nvidia.com/gpu.memory"]) == ("7", "9728")
    inv = build_inventory(policy, _ready(node_manifests(policy)))
    assert inv.problems == ()
    configs = device_plugin_configs(policy)
    assert configs["gpucarve-inf"]["flags"]["migStrategy"] == "single"


def test_a_whole_gpu_request_gets_an_instance_and_a_mig_request_none() -> None:
    policy = build_policy(doc(), packaged_catalog()).policy
    gpu = {"name": "a", "namespace": "serving", "podSets": [
        {"count": 2, "resources": {"limits": {"nvidia.com/gpu": 1}}}]}  # fmt: skip
    w, problems = build_workload(gpu, policy)
    assert w is not None, problems
    result = run_cycle(Snapshot(policy, build_cluster(policy), (), (w,)), 0)
    (adm,) = result.admissions
    assert all("/1g.10gb@" in p.slice_ids[0] for p in adm.pods), adm.pods
    mig = {"name": "b", "namespace": "serving", "podSets": [
        {"resources": {"limits": {"nvidia.com/mig-1g.10gb": 1}}}]}  # fmt: skip
    w, problems = build_workload(mig, policy)
    assert w is None and problems  # no pool publishes nvidia.com/mig-1g.10gb


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"layout": {"3g.40gb": 1, "1g.10gb": 4}}, "mig-single-profiles"),
        ({"dynamic": {}}, "mig-single-dynamic"),
    ],
)
def test_single_pool_mistakes(change: dict[str, Any], code: str) -> None:
    d = doc()
    d["pools"][0]["mig"].update(change)
    with pytest.raises(InvalidInput) as info:
        build_policy(d, packaged_catalog())
    assert code in {p.code for p in info.value.problems}


def test_a_node_whose_strategy_disagrees_with_its_pool_is_reported() -> None:
    single = build_policy(doc(), packaged_catalog()).policy
    mixed = build_policy(doc("mixed"), packaged_catalog()).policy
    inv = build_inventory(mixed, _ready(node_manifests(single)))
    text = "; ".join(p.message for p in inv.problems)
    assert "the node runs the single MIG strategy, pool inf the mixed one" in text
    assert "strategy: single" in text
