"""The fault tests' oracle (`tests/integration/invariants.violations`) on hand-built objects:
each broken invariant is named, and a clean cluster has none."""

from __future__ import annotations

import json
from typing import Any

from tests.integration.invariants import claim_violations, violations

Obj = dict[str, Any]

REASON = {"type": "PodScheduled", "status": "False", "message": "quota: team is full"}


def _node(name: str, gpus: int = 2) -> dict[str, Any]:
    alloc = {"nvidia.com/gpu": str(gpus), "cpu": "8"}
    return {"metadata": {"name": name}, "status": {"allocatable": alloc}}


def _pod(
    name: str, node: str | None, slices: list[str], gpus: int = 1, group: str | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {}, "annotations": {}}
    if group:
        meta["labels"]["gpucarve.io/pod-group"] = group
    if node:
        meta["annotations"]["gpucarve.io/assignment"] = json.dumps({"slices": slices})
    requests = {"nvidia.com/gpu": str(gpus), "cpu": "1"}
    spec: dict[str, Any] = {"containers": [{"resources": {"requests": requests}}]}
    if node:
        spec["nodeName"] = node
    status = {} if node else {"conditions": [REASON]}
    return {"metadata": meta, "spec": spec, "status": status}


def test_a_clean_cluster_breaks_nothing() -> None:
    pods = [_pod("a", "n1", ["n1/gpu0"]), _pod("b", "n1", ["n1/gpu1"]), _pod("c", None, [])]
    counts, problems = violations(pods, [_node("n1")], {"a", "b", "c"})
    assert (counts, problems) == ({"bound": 2, "pending": 1}, [])


def test_each_broken_invariant_is_named() -> None:
    pods = [
        _pod("a", "n1", ["n1/gpu0"]),
        _pod("b", "n1", ["n1/gpu0"]),  # the same slice twice
        _pod("c", "n2", ["n2/gpu0", "n2/gpu1"], gpus=3),  # more than n2 has
        _pod("g0", "n1", ["n1/gpu1"], group="g"),
        _pod("g1", None, [], group="g"),  # half a gang
        _pod("d", "n9", ["n9/gpu0"]),  # a node that is gone
    ]
    pods[4]["status"] = {}  # pending without a reason
    _, problems = violations(
        pods, [_node("n1"), _node("n2")], {p["metadata"]["name"] for p in pods} | {"e"}
    )
    text = "\n".join(problems)
    for expected in (
        "pod e lost",
        "slice n1/gpu0 assigned to ['a', 'b']",
        "node n2: nvidia.com/gpu 3000m used of 2000m",
        "node n1: nvidia.com/gpu 3000m used of 2000m",
        "gang g partly bound: 1 of 2",
        "pod g1 pending without the scheduler's reason",
        "pod d bound to n9, which does not exist",
    ):
        assert expected in text, (expected, problems)


def _claim(name: str, devices: list[str], pod: str | None, shared: bool = False) -> Obj:
    results = [{"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n0", "device": d}
               for d in devices]  # fmt: skip
    status: Obj = {"allocation": {"devices": {"results": results}}}
    if pod:
        status["reservedFor"] = [{"resource": "pods", "name": pod, "uid": "u"}]
    return {"metadata": {"namespace": "ns", "name": name}, "status": status}


def _claim_pod(name: str, node: str, claim: str) -> Obj:
    return {"metadata": {"namespace": "ns", "name": name},
            "spec": {"nodeName": node, "schedulerName": "gpucarve",
                     "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}]}}  # fmt: skip


DEVICES = [{"name": "gpu-0"}, {"name": "gpu-1", "allowMultipleAllocations": True},
           {"name": "gpu-2-mig-9-4-4"}, {"name": "gpu-2-mig-14-4-2"},
           {"name": "gpu-2-mig-14-2-2"}]  # fmt: skip
SLICES = [{"spec": {"pool": {"name": "n0"}, "devices": DEVICES}}]


def test_claim_invariants_find_every_break() -> None:
    pods = [_claim_pod("a", "n0", "ca"), _claim_pod("b", "n0", "cb"), _claim_pod("c", "n1", "cc")]
    good = [_claim("ca", ["gpu-0"], "a"), _claim("cb", ["gpu-1", "gpu-2-mig-9-4-4"], "b"),
            _claim("cx", ["gpu-1", "gpu-2-mig-14-2-2"], None)]  # fmt: skip
    assert claim_violations(good, pods[:2], SLICES) == (3, [])
    bad = [
        _claim("ca", ["gpu-0"], "a"),
        _claim("cb", ["gpu-0", "gpu-2-mig-9-4-4"], "b"),  # gpu-0 twice
        _claim("cd", ["gpu-2-mig-14-4-2"], None),  # slices 4-5 of gpu2 twice
        _claim("cc", ["gpu-7"], "c"),  # unpublished, and pod c runs on another node
    ]
    _, problems = claim_violations(bad, pods, SLICES)
    text = "\n".join(problems)
    assert "device ('n0', 'gpu-0') allocated to ['ns/ca', 'ns/cb']" in text
    assert "share memory slice 4 of n0/gpu2" in text
    assert "which no ResourceSlice publishes" in text and "reserved for pod c on n1" in text
    # a bound pod whose claim is not reserved for it
    _, problems = claim_violations([_claim("ca", ["gpu-0"], None)], pods[:1], SLICES)
    assert problems == ["pod ns/a bound without its claim ca reserved"]
