"""Placement and preemption policies are classes behind one interface each: the shipped ones
are found through their registries, and a new one is a new class."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import pytest

from gpucarve.core.policy import Policy, ScoringWeights
from gpucarve.core.problems import InvalidInput
from gpucarve.core.snapshot import Snapshot
from gpucarve.core.workload import PodSet
from gpucarve.engine import victim_order_names, victims
from gpucarve.engine.decisions import CycleResult, Plugin
from gpucarve.engine.node_state import GpuSlots, NodeState
from gpucarve.engine.placement import plugins
from gpucarve.engine.preemption import Preemptor
from gpucarve.engine.quota import Quotas
from gpucarve.engine.victims import CheapestFirst, Victim, VictimOrder
from gpucarve.engine.working import Working
from tests.engine.builders import cycle, policy, pool, queue, snapshot, submit, workload

CLASSES = [
    {"name": "high", "value": 100, "preemptible": True},
    {"name": "low", "value": 0, "preemptible": True, "default": True},
]


def test_the_profile_weighs_the_registered_scores() -> None:
    chosen = plugins.profile(ScoringWeights.of({"binpack": 1, "spread": 0, "fragmentation": 2}))
    assert [(w, p.name) for w, p in chosen] == [(1, "binpack"), (2, "fragmentation")]
    assert ScoringWeights() == ScoringWeights.of({"binpack": 1, "fragmentation": 2})
    assert [f.name for f in plugins.STATIC_FILTERS] == ["node-selector", "taints"]
    assert [f.name for f in plugins.NODE_FILTERS] == ["reservation", "cpu-memory", "gpu-memory"]
    # every check is named by a Plugin the drivers and explain know
    for f in (*plugins.STATIC_FILTERS, *plugins.NODE_FILTERS):
        assert Plugin(f.name) == f.name
    # fragmentation has no opinion without shapes; binpack favours the fuller node
    frag = plugins.Fragmentation()
    assert frag.score(4, 2, 8, None) == 0 and frag.score(4, 2, 8, {2: 1}) == 50
    assert plugins.Binpack().score(2, 2, 8, None) == 100  # fills the node
    assert plugins.Spread().score(2, 2, 8, None) == 0
    assert victim_order_names() == ("cheapest-first",)


# ----------------------------------------------------------------- what a contributor adds
# Each class below is the whole of an extension; each test adds it with one registry line
# (monkeypatch stands for the line in the registry's module) and nothing else changes.


class OddNodesOnly:
    """A static filter: reads the pod set and the node's fixed facts."""

    name: ClassVar[str] = "odd-nodes"

    def filter(self, ps: PodSet, node: NodeState) -> bool:
        return node.idx % 2 == 1


class KeepTwoCpus:
    """A node filter: reads what changes as pods are placed (here the node's free CPU)."""

    name: ClassVar[str] = "keep-two-cpus"
    reason: ClassVar[Plugin | None] = None
    batched: ClassVar[bool] = False  # the fragmentation model knows nothing of it

    def applies(self, needs: plugins.PodNeeds, placing: plugins.Placing) -> bool:
        return needs.cpu > 0

    def admits(
        self, needs: plugins.PodNeeds, node: NodeState, placing: plugins.Placing
    ) -> bool | GpuSlots:
        return node.cpu_free - needs.cpu >= 2000


class Emptiest:
    """A score: the node with the most free slices after the pod."""

    name: ClassVar[str] = "emptiest"

    def score(self, free: int, taken: int, total: int, shapes: Mapping[int, int] | None) -> int:
        return 100 * (free - taken) // max(1, total)


class OldestFirst:
    """A victim order that is not the shipped one: the longest-running goes first."""

    name: ClassVar[str] = "oldest-first"

    def key(self, v: Victim, ws: Working, now: int) -> tuple[object, ...]:
        return (v.rw.start_time, v.workload.id)


def _nodes(**scheduling: Any) -> Policy:
    """Four 8-GPU nodes of 16 CPUs, one queue owning them; only the per-node scores weigh."""
    return policy(
        pools=[pool("train", "H100-SXM5-80GB", 4, 8, cpusPerNode=16)],
        queues=[queue("research", {"h100-full": {"nominal": 32}})],
        priorityClasses=CLASSES,
        scheduling={"scoring": {"fragmentation": 0}, **scheduling},
    )


def _said(e: InvalidInput) -> str:
    return "\n".join(f"{p.location} [{p.code}] {p.message}; {p.fix}" for p in e.problems)


def _node_of(result: CycleResult, workload_id: str) -> list[str]:
    (a,) = [a for a in result.admissions if a.workload == workload_id]
    return sorted({p.node for p in a.pods})


def test_a_static_filter_added_to_the_registry_refuses_nodes_and_is_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    p = _nodes()
    monkeypatch.setattr(plugins, "STATIC_FILTERS", (*plugins.STATIC_FILTERS, OddNodesOnly()))
    pods = workload(p, "w", "research", gpus=8, pods=2)
    result, _ = cycle(snapshot(p, [pods]), now=0)
    nodes = {n.name: i for i, n in enumerate(snapshot(p).cluster.nodes)}
    assert [nodes[n] % 2 for n in _node_of(result, "research/w")] == [1, 1]
    # a third 8-GPU pod finds no odd node left: the reason counts the filter's refusals
    more = workload(p, "more", "research", gpus=8, pods=3)
    result, _ = cycle(snapshot(p, [more]), now=0)
    (pending,) = result.pending
    assert pending.reason.plugin is Plugin.GPU_SLICES
    assert pending.reason.message.endswith(" by odd-nodes")  # counted over the pods tried


def test_a_node_filter_added_to_the_registry_reads_what_placing_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    p = _nodes()
    many = workload(p, "w", "research", gpus=1, pods=8, cpu="8", min_pods=1)
    result, _ = cycle(snapshot(p, [many]), now=0)
    assert len(result.admissions[0].pods) == 8  # two 8-CPU pods per 16-CPU node
    monkeypatch.setattr(plugins, "NODE_FILTERS", (*plugins.NODE_FILTERS, KeepTwoCpus()))
    result, _ = cycle(snapshot(p, [many]), now=0)
    # now each node keeps two CPUs free: one 8-CPU pod per node
    (a,) = result.admissions
    assert len(a.pods) == 4 and len({p.node for p in a.pods}) == 4
    # the same where the fragmentation model places (the default profile weighs it)
    modelled = policy(
        pools=[pool("train", "H100-SXM5-80GB", 4, 8, cpusPerNode=16)],
        queues=[queue("research", {"h100-full": {"nominal": 32}})],
    )
    many = workload(modelled, "w", "research", gpus=1, pods=8, cpu="8", min_pods=1)
    result, _ = cycle(snapshot(modelled, [many]), now=0)
    (a,) = result.admissions
    assert len(a.pods) == 4 and len({p.node for p in a.pods}) == 4


def test_a_score_added_to_the_registry_may_be_weighed_by_the_policy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(InvalidInput) as refused:
        _nodes(scoring={"emptiest": 5, "fragmentation": 0})
    said = _said(refused.value)
    assert "scheduling.scoring.emptiest" in said and "unknown-score" in said
    assert "binpack, spread, fragmentation" in said  # the fix names what may be weighed
    monkeypatch.setattr(plugins, "SCORES", (*plugins.SCORES, Emptiest()))
    packing = _nodes()
    spreading = _nodes(scoring={"emptiest": 5, "binpack": 0, "fragmentation": 0})
    assert spreading.scheduling.scoring == ScoringWeights.of({"emptiest": 5})
    pods = [workload(packing, f"w{i}", "research", gpus=2, submit=i) for i in range(4)]
    packed, _ = cycle(snapshot(packing, pods), now=0)
    spread, _ = cycle(snapshot(spreading, pods), now=0)
    assert len({n for w in pods for n in _node_of(packed, w.id)}) == 1
    assert len({n for w in pods for n in _node_of(spread, w.id)}) == 4


def _running_two(p: Policy) -> Snapshot:
    first = snapshot(p, [workload(p, "old", "research", gpus=8, pods=2, priority="low")])
    _, first = cycle(first, now=0)
    both = submit(first, workload(p, "new", "research", gpus=8, pods=2, priority="low", submit=50))
    _, both = cycle(both, now=100)
    assert sorted(rw.workload.id for rw in both.running) == ["research/new", "research/old"]
    return both


def test_a_victim_order_added_to_the_registry_may_be_named_by_the_policy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(InvalidInput) as refused:
        _nodes(victimOrder="oldest-first", minRuntimeSeconds=0)
    said = _said(refused.value)
    assert "scheduling.victimOrder" in said and "unknown-victim-order" in said
    assert "cheapest-first" in said
    monkeypatch.setattr(victims, "VICTIM_ORDERS", (*victims.VICTIM_ORDERS, OldestFirst()))
    evicted = {}
    for order in ("cheapest-first", "oldest-first"):
        p = _nodes(victimOrder=order, minRuntimeSeconds=0)
        both = _running_two(p)
        need = workload(p, "need", "research", gpus=8, pods=2, priority="high", submit=200)
        result, _ = cycle(submit(both, need), now=300)
        evicted[order] = [e.workload for e in result.evictions]
    # the shipped order loses the least GPU-time: the newer one; the added one, the older
    assert evicted == {"cheapest-first": ["research/new"], "oldest-first": ["research/old"]}


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
    high = workload(p, "need", "research", gpus=4, priority="high", submit=200)
    orders: dict[str, VictimOrder] = {"cheapest": CheapestFirst(), "oldest": OldestFirst()}
    picked = {}
    for name, order in orders.items():
        ws = Working(both)
        pre = Preemptor(ws, Quotas(p, ws.usage), 300, 0, order)
        picked[name] = [v.workload.id for v in pre.preempt_candidates(high, {"h100-full": 4})]
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
