"""The bound half of the view kept gang by gang between cycles: views built through it equal
fresh views cycle after cycle (pods bound, assumed, deleted, a PodGroup changed, a slice claimed
twice), unchanged gangs are reused and keep their RunningWorkload object, and anything that is
not clean is rebuilt from scratch."""

from __future__ import annotations

import copy
from typing import Any

from gpucarve.engine.working import Working
from gpucarve.kube.view.bound.bound_view import BoundGroups
from gpucarve.kube.view.bound.view_step import maybe_gone, step_between
from gpucarve.kube.view.cluster_view import View, build_view
from gpucarve.kube.view.nodes.inventory import build_inventory
from gpucarve.kube.view.pods.assigned import Assigned
from gpucarve.kube.view.pods.pod_facts import PodFactsMemo
from gpucarve.kube.view.pods.pod_index import PodIndex
from gpucarve.kube.view.pods.pods import GroupSpec, WorkloadCache
from tests.unit.kube.view.test_cluster_view import EPOCH, POLICY, pod, ready_nodes

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
        # what changed in the last `items`, by namespace/name (None: deleted), as
        # `Informer.changes_since` hands it out
        self.changed: dict[str, dict[str, Any] | None] = {}

    def items(self, pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for p in pods:
            name = p["metadata"]["name"]
            same = self.objects.get(name)
            out.append(same if same == p else p)
        now = {p["metadata"]["name"]: p for p in out}
        self.changed = {
            f"{p['metadata']['namespace']}/{n}": p
            for n, p in now.items()
            if self.objects.get(n) is not p
        }
        self.changed.update(
            (f"{p['metadata']['namespace']}/{n}", None)
            for n, p in self.objects.items()
            if n not in now
        )
        self.objects = now
        return out


def _cycles(
    cycles: list[tuple[list[dict[str, Any]], dict[str, Assigned], dict[Any, GroupSpec]]],
) -> list[BoundGroups]:
    """Build each cycle's view three ways and compare: with the kept gangs, with them and a
    pod index fed only the changes, and afresh; the BoundGroups after each cycle (the same
    for both ways that keep)."""
    informer, bound, facts, cache = Informer(), BoundGroups(), PodFactsMemo(EPOCH), WorkloadCache()
    bound2, facts2, cache2 = BoundGroups(), PodFactsMemo(EPOCH), WorkloadCache()
    index = PodIndex("gpucarve", facts2, POLICY.governed_namespaces())
    seen: list[BoundGroups] = []
    last: list[View] = []
    for pods, assumed, specs in cycles:
        objects = informer.items(pods)
        kept = build_view(POLICY, INV, objects, "gpucarve", EPOCH, specs, assumed, cache, facts,
                          bound)  # fmt: skip
        index.sync(informer.changed, assumed, bound2.assumed_pod)
        indexed = build_view(POLICY, INV, (), "gpucarve", EPOCH, specs, assumed, cache2, facts2,
                             bound2, index=index)  # fmt: skip
        fresh = build_view(POLICY, INV, copy.deepcopy(objects), "gpucarve", EPOCH, specs,
                           assumed)  # fmt: skip
        assert _summary(kept) == _summary(fresh)
        assert _summary(indexed) == _summary(fresh)
        assert (bound2.reused, bound2.rebuilt) == (bound.reused, bound.rebuilt)
        if last:
            _follows(last[0], kept)
            _follows(last[1], indexed)
        last = [kept, indexed]
        seen.append(copy.copy(bound))
    return seen


FOLLOWED: list[int] = []  # steps followed by `_follows` (a test counts those it made)
GONE_HINTED: list[int] = []  # running workloads gone where `maybe_gone` named candidates


def _follows(before: View, after: View) -> None:
    """The step between two views' layers takes a fresh index of the first to the state a
    fresh index of the second has (when the step is known)."""
    if before.layers is None or after.layers is None:
        return  # a slice claimed twice, a pod without an assignment: no layers to follow
    hint = maybe_gone(before.layers, after.layers)
    if hint is not None:  # every running workload gone between the two is among them
        assert before.running_pods.keys() - after.running_pods.keys() <= set(hint)
        GONE_HINTED.append(len(before.running_pods.keys() - after.running_pods.keys()))
    step = step_between(before.layers, after.layers)
    if step is None:
        return
    ws = Working(before.snapshot)
    ws.apply_steps([step])
    assert ws.comparable() == Working(after.snapshot).comparable()
    FOLLOWED.append(1)


def test_unchanged_gangs_are_reused_and_the_view_equals_a_fresh_one() -> None:
    followed = len(FOLLOWED)
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
    assert len(FOLLOWED) - followed == 6  # every step known, both ways


def test_a_running_workload_keeps_its_object_while_its_pods_do() -> None:
    informer, bound, facts = Informer(), BoundGroups(), PodFactsMemo(EPOCH)
    a = pod("a", "research", GPU1, "training-1", ["training-1/gpu0"])
    first = build_view(POLICY, INV, informer.items([a]), "gpucarve", EPOCH, {}, facts=facts,
                       bound=bound)  # fmt: skip
    again = build_view(POLICY, INV, informer.items([a]), "gpucarve", EPOCH, {}, facts=facts,
                       bound=bound)  # fmt: skip
    assert again.snapshot.running[0] is first.snapshot.running[0]


def test_a_slice_claimed_twice_or_no_annotation_is_rebuilt_as_from_scratch() -> None:
    followed = len(FOLLOWED)
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
    assert len(FOLLOWED) - followed == 2  # only from a clean view to a clean view


def test_the_index_moves_only_changed_pods_and_the_view_works_out_only_their_gangs() -> None:
    nodes = [n["metadata"]["name"] for n in ready_nodes() if "training" in n["metadata"]["name"]]
    pods = [
        pod(f"p{i:02d}", "research", GPU1, nodes[i // 8], [f"{nodes[i // 8]}/gpu{i % 8}"])
        for i in range(8 * len(nodes))
    ]
    informer, bound, facts = Informer(), BoundGroups(), PodFactsMemo(EPOCH)
    index = PodIndex("gpucarve", facts, POLICY.governed_namespaces())

    def view(objects: list[dict[str, Any]], assumed: dict[str, Assigned]) -> View:
        index.sync(informer.changed, assumed, bound.assumed_pod)
        return build_view(POLICY, INV, (), "gpucarve", EPOCH, {}, assumed, WorkloadCache(),
                          facts, bound, index=index)  # fmt: skip

    objects = informer.items(pods)
    view(objects, {})
    assert (index.moved, bound.rebuilt) == (len(pods), len(pods))
    # one pod deleted, one pending pod assumed bound where the deleted one was
    gone = pods[3]
    new = pod("zz", "research", GPU1)
    objects = informer.items([*pods[:3], *pods[4:], new])
    a = Assigned(gone["spec"]["nodeName"], (f"{gone['spec']['nodeName']}/gpu3",))
    kept = view(objects, {"research/zz": a})
    assert index.moved == 2  # the deleted pod and the new one, nothing else
    assert (bound.reused, bound.rebuilt) == (len(pods) - 1, 1)
    fresh = build_view(POLICY, INV, copy.deepcopy(objects), "gpucarve", EPOCH, {},
                       {"research/zz": a})  # fmt: skip
    assert _summary(kept) == _summary(fresh)
    # the binding seen through the watch: the assumed pod becomes the bound one, one move
    seen = pod("zz", "research", GPU1, a.node, list(a.slices))
    objects = informer.items([*pods[:3], *pods[4:], seen])
    again = view(objects, {})
    assert index.moved == 1 and (bound.reused, bound.rebuilt) == (len(pods) - 1, 1)
    fresh = build_view(POLICY, INV, copy.deepcopy(objects), "gpucarve", EPOCH, {}, {})
    assert _summary(again) == _summary(fresh)


def test_the_step_between_views_covers_pods_another_scheduler_bound() -> None:
    """Pods bound by another scheduler are no kept gang's: a governed one is charged to its
    queue (a running workload of the view's own), another holds its slices; both come and go
    between views, and the step follows them as it follows the kept gangs."""
    followed = len(FOLLOWED)
    a = pod("a", "research", GPU1, "training-1", ["training-1/gpu0"])
    charged = pod("f", "research", GPU1, "training-1", scheduler="default-scheduler")
    other = pod("o", "default", GPU1, "training-2", scheduler="default-scheduler")
    b = pod("b", "research", GPU1, "training-1", ["training-1/gpu3"])
    stats = _cycles(
        [
            ([a, charged], {}, {}),
            ([a, charged, other], {}, {}),
            ([a, other, b], {}, {}),  # the charged pod gone, ours added
            ([b, charged], {}, {}),  # and back, the other gone, a deleted
        ]
    )
    assert [s.reused for s in stats] == [0, 1, 1, 1]
    assert len(FOLLOWED) - followed == 6


def test_a_pod_bound_where_it_was_placed_is_not_validated_again(monkeypatch: Any) -> None:
    """A pending pod's workload is validated once: when it is assumed bound, and when the watch
    shows it bound, its gang is worked out again but finds the workload its document had while
    pending (the two paths must key the validated documents alike)."""
    from gpucarve.kube.view.pods import pods as pods_module

    built: list[str] = []
    real = pods_module.build_workload

    def counting(doc: Any, *args: Any, **kwargs: Any) -> Any:
        built.append(doc["name"])
        return real(doc, *args, **kwargs)

    monkeypatch.setattr(pods_module, "build_workload", counting)
    informer, bound, facts, cache = Informer(), BoundGroups(), PodFactsMemo(EPOCH), WorkloadCache()
    index = PodIndex("gpucarve", facts, POLICY.governed_namespaces())

    def view(pods: list[dict[str, Any]], assumed: dict[str, Assigned]) -> View:
        informer.items(pods)
        index.sync(informer.changed, assumed, bound.assumed_pod)
        return build_view(POLICY, INV, (), "gpucarve", EPOCH, {}, assumed, cache, facts, bound,
                          index=index)  # fmt: skip

    waiting = view([pod("zz", "research", GPU1)], {})
    assert [w.id for w in waiting.snapshot.pending] == ["research/zz"]
    a = Assigned("training-1", ("training-1/gpu0",))
    assumed = view([pod("zz", "research", GPU1)], {"research/zz": a})
    seen = view([pod("zz", "research", GPU1, a.node, list(a.slices))], {})
    for v in (assumed, seen):
        assert [rw.workload.id for rw in v.snapshot.running] == ["research/zz"]
    assert bound.rebuilt == 1  # the gang was worked out again, from the cache
    assert built == ["zz"]


def test_the_workloads_gone_between_views_are_among_those_the_step_names() -> None:
    """`maybe_gone` (the runtime learner's candidates) names every running workload that left
    between two views (checked in `_follows` for every pair of views of these tests), the
    kept gangs' and the charged ones'; here some do leave."""
    hinted = len(GONE_HINTED)
    a = pod("a", "research", GPU1, "training-1", ["training-1/gpu0"])
    b = pod("b", "research", GPU1, "training-1", ["training-1/gpu1"])
    charged = pod("f", "research", GPU1, "training-1", scheduler="default-scheduler")
    _cycles([([a, b, charged], {}, {}), ([a], {}, {}), ([a, charged], {}, {}), ([b], {}, {})])
    assert sum(GONE_HINTED[hinted:]) >= 3  # b and f, then a and f
