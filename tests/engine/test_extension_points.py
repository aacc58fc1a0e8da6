"""Placement and preemption policies are classes behind one interface each: the shipped ones
are found through their registries, and a new one is a new class."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from gpucarve.core.policy import Policy, ScoringWeights
from gpucarve.core.workload import PodSet
from gpucarve.engine.node_state import NodeState
from gpucarve.engine.placement import plugins
from gpucarve.engine.preemption import CheapestFirst, Preemptor, Victim, VictimOrder
from gpucarve.engine.quota import Quotas
from gpucarve.engine.working import Working
from tests.engine.builders import cycle, policy, pool, queue, snapshot, submit, workload

CLASSES = [
    {"name": "high", "value": 100, "preemptible": True},
    {"name": "low", "value": 0, "preemptible": True, "default": True},
]


def test_the_profile_weighs_the_registered_scores() -> None:
    chosen = plugins.profile(ScoringWeights(binpack=1, spread=0, fragmentation=2))
    assert [(w, p.name) for w, p in chosen] == [(1, "binpack"), (2, "fragmentation")]
    assert [f.name for f in plugins.STATIC_FILTERS] == ["node-selector", "taints"]
    # fragmentation has no opinion without shapes; binpack favours the fuller node
    frag = plugins.Fragmentation()
    assert frag.score(4, 2, 8, None) == 0 and frag.score(4, 2, 8, {2: 1}) == 50
    assert plugins.Binpack().score(2, 2, 8, None) == 100  # fills the node
    assert plugins.Spread().score(2, 2, 8, None) == 0


class EvenNodesOnly:
    """A filter a contributor might add: a class with a name and `filter`."""

    name: ClassVar[str] = "even-nodes"

    def filter(self, ps: PodSet, node: NodeState) -> bool:
        return node.idx % 2 == 0


class Emptiest:
    name: ClassVar[str] = "emptiest"

    def score(self, free: int, taken: int, total: int, shapes: Mapping[int, int] | None) -> int:
        return 100 * free // max(1, total)


def test_new_plugins_are_classes_of_the_interfaces() -> None:
    f: plugins.FilterPlugin = EvenNodesOnly()
    s: plugins.ScorePlugin = Emptiest()
    assert (f.name, s.name) == ("even-nodes", "emptiest")
    assert s.score(8, 1, 8, None) == 100 and s.score(0, 1, 8, None) == 0


class OldestFirst:
    """A victim order that is not the shipped one: the longest-running goes first."""

    def key(self, v: Victim, ws: Working, now: int) -> tuple[object, ...]:
        return (v.rw.start_time, v.workload.id)


def _one_node(min_runtime: int) -> Policy:
    """One 8-GPU node, one queue owning it, two priority classes."""
    return policy(
        pools=[pool("train", "H100-SXM5-80GB", 1, 8)],
        queues=[queue("research", {"h100-full": {"nominal": 8}})],
        priorityClasses=CLASSES,
        scheduling={"minRuntimeSeconds": min_runtime},
    )


def test_a_victim_order_is_a_class_the_preemptor_takes() -> None:
    p = _one_node(min_runtime=0)
    first = snapshot(p, [workload(p, "old", "research", gpus=4, priority="low", submit=0)])
    _, first = cycle(first, now=0)
    both = submit(first, workload(p, "new", "research", gpus=4, priority="low", submit=50))
    _, both = cycle(both, now=100)
    assert sorted(rw.workload.id for rw in both.running) == ["research/new", "research/old"]
    high = workload(p, "need", "research", gpus=4, priority="high", submit=200)
    orders: dict[str, VictimOrder] = {"cheapest": CheapestFirst(), "oldest": OldestFirst()}
    picked = {}
    for name, order in orders.items():
        ws = Working(both)
        pre = Preemptor(ws, Quotas(p, ws.usage), 300, 0, order)
        picked[name] = [v.workload.id for v in pre.preempt_candidates(high, {"h100-full": 4})]
    # the shipped order loses the least GPU-time: the newer one; the other, the older
    assert picked["cheapest"][0] == "research/new"
    assert picked["oldest"][0] == "research/old"


def test_a_placers_filter_verdicts_never_follow_an_objects_id() -> None:
    # A placer that outlives the pod sets it saw (the fill experiment keeps one) must not hand
    # a dead pod set's verdict to a new one that CPython gives the same id.
    import dataclasses

    from gpucarve.core.cluster import build_cluster
    from gpucarve.core.snapshot import Snapshot
    from gpucarve.engine.placement.placer import Placer
    from gpucarve.engine.placement.plugins import PodNeeds

    p = policy(
        pools=[pool("a", "H100-SXM5-80GB", 1, 8, nodeLabels={"zone": "a"})],
        queues=[queue("research", {"h100-full": {"nominal": 8}})],
    )
    ws = Working(Snapshot(p, build_cluster(p), (), ()))
    placer = Placer(ws, p.scheduling.scoring, 16)
    node = ws.nodes[0]
    base = workload(p, "w", "research", gpus=1).pod_sets[0]
    for _ in range(100):
        picky = dataclasses.replace(base, node_selector=(("zone", "b"),))
        assert placer._static_reject(PodNeeds(picky, None, 0, False, 0, 0, 0), node) == (
            "node-selector"
        )
        del picky
        plain = dataclasses.replace(base)
        # (CPython mostly gives `plain` the dead `picky`'s id: the case that went wrong)
        assert placer._static_reject(PodNeeds(plain, None, 0, False, 0, 0, 0), node) is None
    assert placer._static_reject(PodNeeds(base, None, 0, False, 0, 0, 0), node) is None


def test_a_preemption_held_back_by_the_minimum_runtime_says_so_with_the_time_left() -> None:
    """A high-priority workload that only the victims' minimum runtime keeps waiting is told
    so, with the seconds left (not a placement reason that would advise more quota), and
    preempts once the runtime is reached."""
    from gpucarve.engine.decisions import Plugin, Stage

    p = _one_node(min_runtime=300)
    s = snapshot(p, [workload(p, "low", "research", gpus=8, priority="low", submit=0)])
    _, s = cycle(s, now=0)
    s = submit(s, workload(p, "urgent", "research", gpus=8, priority="high", submit=100))
    result, s = cycle(s, now=100)
    (pending,) = result.pending
    assert (pending.reason.stage, pending.reason.plugin) == (Stage.PREEMPTION, Plugin.MIN_RUNTIME)
    assert "waits to preempt research/low (priority 0 < 100)" in pending.reason.message
    assert "has run 100 s of its minimum runtime of 300 s" in pending.reason.message
    assert "preemptible in 200 s" in pending.reason.message
    # explain says the same, and advises no quota change
    from gpucarve.engine.explain import explain

    said = explain(s, result, "research/urgent")
    assert said is not None and any("preemptible in 200 s" in h for h in said.hints)
    assert not any("nominal" in h for h in said.hints)
    result, _ = cycle(s, now=300)
    assert [e.workload for e in result.evictions] == ["research/low"]
