"""The bound half of the view kept gang by gang between cycles: views built through it equal
fresh views cycle after cycle (pods bound, assumed, deleted, a PodGroup changed, a slice claimed
twice), unchanged gangs are reused and keep their RunningWorkload object, and anything that is
not clean is rebuilt from scratch."""

from __future__ import annotations

import copy
from typing import Any

from gpucarve.kube.view.assigned import Assigned
from gpucarve.kube.view.bound_view import BoundGroups
from gpucarve.kube.view.cluster_view import View, build_view
from gpucarve.kube.view.inventory import build_inventory
from gpucarve.kube.view.pod_facts import PodFactsMemo
from gpucarve.kube.view.pods import GroupSpec, WorkloadCache
from tests.unit.test_kube_view import EPOCH, POLICY, pod, ready_nodes

GPU8 = {"nvidia.com/gpu": "8"}
GPU1 = {"nvidia.com/gpu": "1"}
INV = build_inventory(POLICY, ready_nodes())


def _summary(view: View) -> tuple[Any, ...]:
    s = view.snapshot
    return (
        [(rw.workload, rw.pods, rw.start_time, rw.terminating) for rw in s.running],
        [(w.id, w.pod_sets, w.submit_time) for w in s.pending],
        dict(s.cluster.allocations),
        dict(s.partial),
        view.pending_sets,
        view.running_pods,
        view.invalid,
        view.warnings,
        view.orphans,
    )


class Informer:
    """Hands out pod objects as the real informer does: a changed pod is a new object, an
    unchanged one the same object as before."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}

    def items(self, pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for p in pods:
            name = p["metadata"]["name"]
            same = self.objects.get(name)
            out.append(same if same == p else p)
        self.objects = {p["metadata"]["name"]: p for p in out}
        return out


def _cycles(
    cycles: list[tuple[list[dict[str, Any]], dict[str, Assigned], dict[Any, GroupSpec]]],
) -> list[BoundGroups]:
    """Build each cycle's view both ways and compare; the BoundGroups after each cycle."""
    informer, bound, facts, cache = Informer(), BoundGroups(), PodFactsMemo(EPOCH), WorkloadCache()
    seen: list[BoundGroups] = []
    for pods, assumed, specs in cycles:
        objects = informer.items(pods)
        kept = build_view(POLICY, INV, objects, "gpucarve", EPOCH, specs, assumed, cache, facts,
                          bound)  # fmt: skip
        fresh = build_view(POLICY, INV, copy.deepcopy(objects), "gpucarve", EPOCH, specs,
                           assumed)  # fmt: skip
        assert _summary(kept) == _summary(fresh)
        seen.append(copy.copy(bound))
    return seen


def test_unchanged_gangs_are_reused_and_the_view_equals_a_fresh_one() -> None:
    slices = [f"training-0/gpu{i}" for i in range(8)]
    g = {("research", "g"): GroupSpec(2)}
    a = pod("a", "research", GPU1, "training-1", ["training-1/gpu0"])
    b = pod("b", "research", GPU1, "training-1", ["training-1/gpu1"])
    c_assumed = {"research/c": Assigned("training-1", ("training-1/gpu2",))}
    c = pod("c", "research", GPU1)
    stats = _cycles(
        [
            ([a, b, c], c_assumed, {}),
            # the same objects: everything reused, the assumed pod too
            ([a, b, c], c_assumed, {}),
            # c's binding seen; a gang bound in part; b deleted
            ([a, pod("c", "research", GPU1, "training-1", ["training-1/gpu2"]),
              pod("g-0", "research", GPU8, "training-0", slices, group="g"),
              pod("g-1", "research", GPU8, group="g")], {}, g),
            # the PodGroup asks for something else: that gang is worked out again
            ([a, pod("c", "research", GPU1, "training-1", ["training-1/gpu2"]),
              pod("g-0", "research", GPU8, "training-0", slices, group="g"),
              pod("g-1", "research", GPU8, group="g")], {}, {("research", "g"): GroupSpec(1)}),
        ]
    )  # fmt: skip
    assert [(s.reused, s.rebuilt) for s in stats] == [(0, 3), (3, 0), (1, 2), (2, 1)]


def test_a_running_workload_keeps_its_object_while_its_pods_do() -> None:
    informer, bound, facts = Informer(), BoundGroups(), PodFactsMemo(EPOCH)
    a = pod("a", "research", GPU1, "training-1", ["training-1/gpu0"])
    first = build_view(POLICY, INV, informer.items([a]), "gpucarve", EPOCH, {}, facts=facts,
                       bound=bound)  # fmt: skip
    again = build_view(POLICY, INV, informer.items([a]), "gpucarve", EPOCH, {}, facts=facts,
                       bound=bound)  # fmt: skip
    assert again.snapshot.running[0] is first.snapshot.running[0]


def test_a_slice_claimed_twice_or_no_annotation_is_rebuilt_as_from_scratch() -> None:
    a = pod("a", "research", GPU1, "training-1", ["training-1/gpu0"])
    stats = _cycles(
        [
            ([a], {}, {}),
            # "0b" claims a's slice: sorted before a, a fresh view gives it the slice and a the
            # next free one; keeping a's claim would do the opposite
            ([a, pod("0b", "research", GPU1, "training-1", ["training-1/gpu0"])], {}, {}),
            # bound by hand, no annotation: the first free slices, in key order
            ([a, pod("0c", "research", GPU1, "training-1")], {}, {}),
            # 0c took a's slice, so a took another and was not kept: worked out again; an
            # orphan (its queue is gone) keeps its slices and is reused from the next cycle
            ([a, pod("o", "nosuch", GPU1, "training-1", ["training-1/gpu6"])], {}, {}),
            ([a, pod("o", "nosuch", GPU1, "training-1", ["training-1/gpu6"])], {}, {}),
        ]
    )
    assert [s.reused for s in stats] == [0, 0, 0, 0, 2]
