"""The fault tests' oracle (`tests/integration/invariants.violations`) on hand-built objects:
each broken invariant is named, and a clean cluster has none."""

from __future__ import annotations

import json
from typing import Any

from tests.integration.invariants import violations

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
