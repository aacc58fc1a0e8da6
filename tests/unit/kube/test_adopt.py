"""`gpucarve adopt` on objects: the nodes a policy's pools make (as GFD and the device plugin
describe them) read back into the same pools; ResourceQuotas into queues; what does not fit is
reported, never dropped."""

from __future__ import annotations

import copy
from typing import Any

from gpucarve.config.catalog_file import packaged_catalog
from gpucarve.config.examples import POLICY, example_path
from gpucarve.config.policy_build import build_policy, load_policy
from gpucarve.devcluster.nodes import node_manifests
from gpucarve.kube.adopt import adopt, with_quotas

EXAMPLE = load_policy(example_path(POLICY)).policy


def _quota(ns: str, hard: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ResourceQuota",
            "metadata": {"name": "gpus", "namespace": ns}, "spec": {"hard": hard}}  # fmt: skip


def _gpu_pod(ns: str, name: str, node: str, resource: str) -> dict[str, Any]:
    limits = {resource: "1"}
    return {"metadata": {"name": name, "namespace": ns},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources":
                                                        {"limits": limits}}]},
            "status": {"phase": "Running"}}  # fmt: skip


def test_the_example_clusters_nodes_read_back_into_its_pools() -> None:
    nodes = node_manifests(EXAMPLE)
    for n in nodes:  # a cluster knows nothing of gpucarve's own pool label
        n["metadata"]["labels"].pop("gpucarve.io/pool", None)
    adopted = adopt(nodes, packaged_catalog(), "three")
    pools = {p["gpuModel"]: p for p in adopted.doc["pools"]}
    assert set(pools) == {"H100-SXM5-80GB", "A100-80GB", "L40S"}
    for original in EXAMPLE.pools:
        got = pools[original.model.id]
        assert (got["nodes"], got["gpusPerNode"], got["sharing"]) == (
            original.nodes, original.gpus_per_node, original.sharing.value)  # fmt: skip
        assert got["cpusPerNode"] * 1000 == original.cpu_milli_per_node
    assert pools["A100-80GB"]["mig"] == {"layout": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}}
    assert pools["L40S"]["replicas"] == 8 and "renameByDefault" not in pools["L40S"]
    assert pools["H100-SXM5-80GB"]["taints"] == [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    ]
    # each pool selects its nodes by their product label
    assert pools["L40S"]["nodeLabels"] == {"nvidia.com/gpu.product": "NVIDIA-L40S"}
    policy = build_policy(adopted.doc, packaged_catalog()).policy  # it validates
    assert dict(policy.capacity.items()) == dict(EXAMPLE.capacity)


def test_quotas_become_queues_and_unreadable_ones_are_reported() -> None:
    nodes = node_manifests(EXAMPLE)
    adopted = adopt(nodes, packaged_catalog())
    pools_only = build_policy(adopted.doc, packaged_catalog()).policy
    objects = [
        _quota("research", {"requests.nvidia.com/gpu": "16"}),
        _quota(
            "serving",
            {"requests.nvidia.com/mig-3g.40gb": "12", "requests.nvidia.com/mig-1g.10gb": "16"},
        ),
        _quota("huge", {"requests.nvidia.com/gpu": "999"}),
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": "prod"},
            "value": 1000,
        },
    ]
    pods = [_gpu_pod("serving", "s", "production-0", "nvidia.com/mig-3g.40gb"),
            _gpu_pod("notebooks", "n", "dev-0", "nvidia.com/gpu.shared")]  # fmt: skip
    with_quotas(adopted, objects, pools_only, pods)
    queues = {q["name"]: q["quota"] for q in adopted.doc["queues"]}
    assert queues["research"] == {"h100-full": {"nominal": 16}}
    assert queues["serving"] == {
        "a100-mig-1g.10gb": {"nominal": 16}, "a100-mig-3g.40gb": {"nominal": 12}}  # fmt: skip
    assert "huge" not in queues
    assert any("999" in line and "left out" in line for line in adopted.report)
    assert [c["name"] for c in adopted.doc["priorityClasses"]] == ["prod"]
    assert any("namespace notebooks runs GPU pods without a ResourceQuota" in line
               for line in adopted.report)  # fmt: skip
    build_policy(adopted.doc, packaged_catalog())  # the whole policy validates


def test_nodes_that_cannot_be_read_are_named() -> None:
    nodes = copy.deepcopy(node_manifests(EXAMPLE))
    nodes[0]["metadata"]["labels"].pop("nvidia.com/gpu.product")
    nodes[1]["metadata"]["labels"]["nvidia.com/gpu.product"] = "Imaginary-GPU-9000"
    (mig,) = [n for n in nodes if n["metadata"]["name"] == "production-0"]
    mig["status"]["allocatable"]["nvidia.com/mig-1g.10gb"] = "3"  # not even over 2 GPUs
    adopted = adopt(nodes, packaged_catalog())
    text = "\n".join(adopted.report)
    assert f"node {nodes[0]['metadata']['name']}: GPUs but no nvidia.com/gpu.product" in text
    assert "Imaginary-GPU-9000 is no catalog model" in text
    assert "node production-0: MIG instances" in text and "perGpu" in text


def test_quotas_that_already_bind_are_reported() -> None:
    adopted = adopt(node_manifests(EXAMPLE), packaged_catalog())
    pools_only = build_policy(adopted.doc, packaged_catalog()).policy
    full = _quota("serving", {"requests.nvidia.com/mig-3g.40gb": "2"})
    roomy = _quota("research", {"requests.nvidia.com/gpu": "16"})
    roomy["status"] = {"used": {"requests.nvidia.com/gpu": "8"}}
    pods = [_gpu_pod("serving", f"s{i}", "production-0", "nvidia.com/mig-3g.40gb")
            for i in range(2)]  # fmt: skip
    with_quotas(adopted, [full, roomy], pools_only, pods)
    binds = [line for line in adopted.report if line.startswith("quota binds")]
    assert binds == [
        "quota binds: namespace serving uses 2 of its 2 nvidia.com/mig-3g.40gb (no more such "
        "pods start until some finish; in gpucarve a queue borrows what its cohort leaves unused)"
    ]


def test_dra_nodes_become_dra_pools_read_from_their_resource_slices() -> None:
    from gpucarve.devcluster.nodes import slice_manifests
    from tests.paths import EXAMPLES

    dra = load_policy(EXAMPLES / "dra" / "policy.yaml").policy
    nodes = node_manifests(dra)
    for n in nodes:
        n["metadata"]["labels"].pop("gpucarve.io/pool", None)
    adopted = adopt(nodes, packaged_catalog(), "dra", slice_manifests(dra))
    pools = {(p["gpuModel"], p["sharing"], p.get("devices", "device-plugin")): p
             for p in adopted.doc["pools"]}  # fmt: skip
    assert set(pools) == {
        ("H100-SXM5-80GB", "exclusive", "dra"),
        ("A100-80GB", "mig", "dra"),
        ("L40S", "time-slicing", "dra"),
        ("A100-80GB", "exclusive", "device-plugin"),
    }, adopted.report
    assert pools[("H100-SXM5-80GB", "exclusive", "dra")]["gpusPerNode"] == 8
    assert pools[("A100-80GB", "mig", "dra")]["mig"] == {
        "layout": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}}  # fmt: skip
    assert pools[("L40S", "time-slicing", "dra")]["replicas"] == 4
    policy = build_policy(adopted.doc, packaged_catalog()).policy  # it validates
    assert dict(policy.capacity.items()) == dict(dra.capacity)
    # without the slices the DRA nodes are named, never dropped in silence
    alone = adopt(nodes, packaged_catalog(), "dra")
    assert any("neither the device plugin nor NVIDIA's DRA driver" in line
               for line in alone.report), alone.report  # fmt: skip


def test_a_gpu_quota_over_several_models_is_split_by_capacity_and_said() -> None:
    nodes = node_manifests(EXAMPLE)
    # the A100 pool's nodes publish whole GPUs too: two models behind nvidia.com/gpu
    for n in nodes:
        if n["metadata"]["name"].startswith("production-"):
            alloc = n["status"]["allocatable"]
            for k in [k for k in alloc if k.startswith("nvidia.com/mig-")]:
                del alloc[k]
            alloc["nvidia.com/gpu"] = "2"
    adopted = adopt(nodes, packaged_catalog())
    pools_only = build_policy(adopted.doc, packaged_catalog()).policy
    with_quotas(adopted, [_quota("research", {"requests.nvidia.com/gpu": "20"})], pools_only, [])
    (queue,) = adopted.doc["queues"]
    quota = {f: q["nominal"] for f, q in queue["quota"].items()}
    assert sum(quota.values()) == 20 and len(quota) == 2, quota
    # 32 H100s and 16 A100s: two to one
    assert sorted(quota.values()) == [7, 13], quota
    said = [line for line in adopted.report if line.startswith("as read:")]
    assert said and "split by the pools' capacity" in said[0] and "Problem(" not in said[0]
    assert not any("without a ResourceQuota" in line for line in adopted.report)
