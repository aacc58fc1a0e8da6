"""The per-pod memo the scheduler keeps between views: a pod object seen before is not parsed
again, a pod the watch replaced is, the memo holds only the last cycle's pods, and views built
through it equal views built afresh, cycle after cycle, while pods change."""

from __future__ import annotations

import copy
import json
from typing import Any

from gpucarve.core.vocabulary import ASSIGNMENT_ANNOTATION as ASSIGNMENT
from gpucarve.kube.view.cluster_view import View, build_view
from gpucarve.kube.view.nodes.inventory import build_inventory
from gpucarve.kube.view.pods.pod_facts import PodFactsMemo
from gpucarve.kube.view.pods.pods import GroupSpec
from tests.unit.kube.view.test_cluster_view import EPOCH, POLICY, pod, ready_nodes


def test_a_seen_object_is_not_parsed_again_and_a_replaced_one_is() -> None:
    memo = PodFactsMemo(EPOCH)
    p = pod("a", "research", {"nvidia.com/gpu": "1"}, "training-0", ["training-0/gpu0"])
    first = memo.of(p)
    assert first.key == "research/a" and first.group == ("research", "a")
    assert first.assigned is not None and first.assigned.slices == ("training-0/gpu0",)
    assert first.started == 10
    memo.roll()
    assert memo.of(p) is first  # the same version: the same facts, no parsing
    # the watch delivers a new object for the new version: it is read afresh
    moved = copy.deepcopy(p)
    moved["metadata"]["annotations"][ASSIGNMENT] = json.dumps({"slices": ["training-0/gpu3"]})
    moved["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": "g"}
    again = memo.of(moved)
    assert again is not first
    assert again.assigned is not None and again.assigned.slices == ("training-0/gpu3",)
    assert again.group == ("research", "g")


def test_the_memo_keeps_only_the_pods_of_the_last_cycle() -> None:
    memo = PodFactsMemo(EPOCH)
    old = pod("old", "research", {"nvidia.com/gpu": "1"})
    kept = pod("kept", "research", {"nvidia.com/gpu": "1"})
    facts_old, facts_kept = memo.of(old), memo.of(kept)
    memo.roll()
    assert memo.of(kept) is facts_kept  # seen in this cycle too
    memo.roll()
    memo.roll()
    assert memo.of(kept) is not facts_kept  # unseen for a whole cycle: forgotten
    assert memo.of(old) is not facts_old


def _summary(view: View) -> tuple[Any, ...]:
    s = view.snapshot
    return (
        sorted((rw.workload.id, rw.pods, rw.start_time) for rw in s.running),
        sorted((w.id, w.pod_sets, w.submit_time) for w in s.pending),
        dict(s.cluster.allocations),
        dict(s.partial),
        view.pending_sets,
        view.invalid,
        view.warnings,
    )


def test_views_through_the_memo_equal_fresh_views_while_pods_change() -> None:
    inv = build_inventory(POLICY, ready_nodes())
    specs = {("research", "g"): GroupSpec(3)}
    gpu8 = {"nvidia.com/gpu": "8"}
    slices = [f"training-0/gpu{i}" for i in range(8)]
    cycles: list[list[dict[str, Any]]] = [
        [pod("g-0", "research", gpu8, group="g"), pod("g-1", "research", gpu8, group="g"),
         pod("x", "research", {"nvidia.com/gpu": "1"})],
        # g-0 bound (a new object from the watch), g-2 created, x unchanged
        [pod("g-0", "research", gpu8, "training-0", slices, group="g"),
         pod("g-1", "research", gpu8, group="g"), pod("g-2", "research", gpu8, group="g"),
         pod("x", "research", {"nvidia.com/gpu": "1"})],
        # x bound on its sixth GPU (read as the first free one, were its old facts kept);
        # g-1 deleted
        [pod("g-0", "research", gpu8, "training-0", slices, group="g"),
         pod("g-2", "research", gpu8, group="g"),
         pod("x", "research", {"nvidia.com/gpu": "1"}, "training-1", ["training-1/gpu5"])],
    ]  # fmt: skip
    memo = PodFactsMemo(EPOCH)
    previous: dict[str, dict[str, Any]] = {}
    for pods in cycles:
        # what the informer does: an unchanged pod keeps its object, a changed one is new
        objects = []
        for p in pods:
            name = p["metadata"]["name"]
            same = previous.get(name)
            objects.append(same if same == p else p)
        previous = {p["metadata"]["name"]: p for p in objects}
        through_memo = build_view(POLICY, inv, objects, "gpucarve", EPOCH, specs, facts=memo)
        fresh = build_view(POLICY, inv, copy.deepcopy(objects), "gpucarve", EPOCH, specs)
        assert _summary(through_memo) == _summary(fresh)
    running = {rw.workload.id for rw in through_memo.snapshot.running}
    assert running == {"research/g", "research/x"}
