"""The bound half of the view: running workloads and the slices they hold, kept gang by gang
between cycles so that a cycle costs what changed rather than every bound pod.

A gang's result (its RunningWorkload, or why it is no workload of the policy, and the slices
its pods claimed) is kept while its pod objects, their assignments and its PodGroup spec are
the very ones of the last cycle; the informer replaces an object on every change, so an
unchanged object is an unchanged pod. Only *clean* gangs are kept: every pod claimed the
slices its assignment names, none took the first free ones. Claims that all succeed do not
depend on their order, so slices of kept gangs plus the new gangs' claims give exactly the
allocations a fresh rebuild gives. When a new gang's claim would not be clean (a slice claimed
twice, a pod without an assignment), or the policy, the inventory or the kubelet's device
reports are involved, the whole bound half is rebuilt in key order, as from scratch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gpucarve.core.cluster import Allocation
from gpucarve.core.policy import Policy
from gpucarve.core.workload import PodAssignment, RunningWorkload
from gpucarve.kube.view.assigned import Assigned
from gpucarve.kube.view.inventory import Inventory
from gpucarve.kube.view.pod_facts import PodFactsMemo
from gpucarve.kube.view.pods import GroupSpec, PendingGroup, WorkloadCache, pending_workloads
from gpucarve.kube.view.slice_claims import SliceClaims

GroupKey = tuple[str, str]
Bound = tuple[Mapping[str, Any], Assigned | None]


@dataclass
class BoundSection:
    running: list[RunningWorkload] = field(default_factory=list)
    running_pods: dict[str, tuple[str, ...]] = field(default_factory=dict)
    bound_count: dict[GroupKey, int] = field(default_factory=dict)
    running_by_key: dict[GroupKey, RunningWorkload] = field(default_factory=dict)
    orphans: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class _Kept:
    sig: tuple[object, ...]
    keep: tuple[object, ...]  # the objects whose ids the signature holds, kept alive
    group: PendingGroup
    running: RunningWorkload | None  # None: no workload of the policy (an orphan)
    why: str
    allocs: dict[str, Allocation]


class BoundGroups:
    """What the scheduler keeps of the bound half between its cycles."""

    def __init__(self) -> None:
        self._basis: tuple[Policy, Inventory] | None = None
        self._kept: dict[GroupKey, _Kept] = {}
        self._assumed: dict[tuple[int, int], tuple[Mapping[str, Any], Assigned, Any]] = {}
        self.reused = 0  # gangs taken as kept in the last view (for tests and profiles)
        self.rebuilt = 0  # gangs worked out afresh in the last view

    def assumed_pod(self, pod: Mapping[str, Any], a: Assigned) -> Mapping[str, Any]:
        """The pod as bound where this scheduler bound it and the watch has not shown yet:
        one object per (pod object, assignment), so an assumed gang can be kept too."""
        hit = self._assumed.get((id(pod), id(a)))
        if hit is not None and hit[0] is pod and hit[1] is a:
            return hit[2]  # type: ignore[no-any-return]
        bound = {**pod, "spec": {**(pod.get("spec") or {}), "nodeName": a.node}}
        if len(self._assumed) > 100_000:
            self._assumed.clear()
        self._assumed[(id(pod), id(a))] = (pod, a, bound)
        return bound


@dataclass(frozen=True)
class _Inputs:
    """What grouping bound pods into workloads depends on, for one view."""

    policy: Policy
    epoch: datetime
    specs: Mapping[GroupKey, GroupSpec]
    cache: WorkloadCache | None
    facts: PodFactsMemo

    def grouped(self, bound: Sequence[Bound]) -> tuple[list[PendingGroup], dict[str, Bound]]:
        """The workloads of `bound` (in group key order) and each pod's entry by its key."""
        groups = pending_workloads(
            [p for p, _ in bound], self.policy, self.epoch, self.specs, self.cache,
            keyed=self.facts.group,
        )  # fmt: skip
        return groups, {self.facts.of(p).key: (p, a) for p, a in bound}


def claim_bound(
    b: SliceClaims,
    ours_bound: Sequence[Bound],
    policy: Policy,
    inventory: Inventory,
    epoch: datetime,
    specs: Mapping[GroupKey, GroupSpec],
    cache: WorkloadCache | None,
    facts: PodFactsMemo,
    kept: BoundGroups | None,
) -> BoundSection:
    """Claim the bound pods' slices in `b` and make their running workloads."""
    inputs = _Inputs(policy, epoch, specs, cache, facts)
    if kept is None or inventory.reported:
        return _rebuild(b, ours_bound, inputs, None)
    last = kept._basis
    if last is None or last[0] is not policy or last[1] is not inventory:
        kept._kept = {}  # a new policy or inventory object: every gang anew
        kept._basis = (policy, inventory)
    by_group: dict[GroupKey, list[Bound]] = {}
    for pod, a in ours_bound:
        by_group.setdefault(facts.group(pod), []).append((pod, a))
    reuse: dict[GroupKey, _Kept] = {}
    changed: list[Bound] = []
    for gk, members in by_group.items():
        old = kept._kept.get(gk)
        if old is not None and old.sig == _sig(members, specs.get(gk)):
            reuse[gk] = old
        else:
            changed += members
    for k in reuse.values():
        b.allocs.update(k.allocs)
    groups, by_key = inputs.grouped(changed)
    fresh: dict[GroupKey, _Kept] = {}
    for g in groups:
        gk = facts.of(by_key[g.pods[0]][0]).group
        done = _group(g, by_key, b, facts, specs.get(gk), cache, strict=True)
        if done is None:  # not clean: a fresh rebuild decides it, in key order
            b.reset()
            return _rebuild(b, ours_bound, inputs, kept)
        fresh[gk] = done
    kept._kept = {**reuse, **fresh}
    kept.reused, kept.rebuilt = len(reuse), len(fresh)
    return _section(sorted(kept._kept.items()))  # by gang key: keys are unique


def _rebuild(
    b: SliceClaims, ours_bound: Sequence[Bound], inputs: _Inputs, kept: BoundGroups | None
) -> BoundSection:
    facts, specs, cache = inputs.facts, inputs.specs, inputs.cache
    groups, by_key = inputs.grouped(ours_bound)
    done: list[tuple[GroupKey, _Kept]] = []
    for g in groups:
        gk = facts.of(by_key[g.pods[0]][0]).group
        k = _group(g, by_key, b, facts, specs.get(gk), cache)
        if k is not None:  # always, when not strict
            done.append((gk, k))
    if kept is not None:
        kept._kept = {gk: k for gk, k in done if k.sig}
        kept.reused, kept.rebuilt = 0, len(done)
    return _section(done)


def _sig(members: Sequence[Bound], spec: GroupSpec | None) -> tuple[object, ...]:
    return (spec, *sorted((id(p), id(a)) for p, a in members))


def _group(
    g: PendingGroup,
    by_key: Mapping[str, Bound],
    b: SliceClaims,
    facts: PodFactsMemo,
    spec: GroupSpec | None,
    cache: WorkloadCache | None,
    strict: bool = False,
) -> _Kept | None:
    """One gang's claims and result, as a fresh view makes them. `strict`: None unless every
    pod claims the slices its assignment names (the caller then rebuilds everything);
    otherwise a pod whose claim fails takes the first free slices, and a gang that needed that
    is not kept (an empty signature)."""
    members = [by_key[k] for k in g.pods]
    keep = tuple(x for m in members for x in m)
    if g.workload is None:
        why = "; ".join(p.message for p in g.problems) or "no workload of the policy"
        clean = True
        for k, (pod, a) in zip(g.pods, members, strict=True):
            if a is None or not b.claim(k, a):
                if strict:
                    return None
                clean = False
                b.fallback(k, pod)
        sig = _sig(members, spec) if clean else ()
        return _Kept(sig, keep, g, None, why, _held(b, members) if clean else {})
    claimed = [a is not None and b.claim(k, a) for k, (_, a) in zip(g.pods, members, strict=True)]
    clean = all(claimed)
    if strict and not clean:
        return None
    sig = _sig(members, spec) if clean else ()
    terminating = any(pod["metadata"].get("deletionTimestamp") for pod, _ in members)
    start = min(facts.of(pod).started for pod, _ in members)
    # An unchanged workload gets the same RunningWorkload object, so the engine skips it when
    # it brings its indexed cluster up to date (the value keeps the keyed objects alive).
    memo = (id(g), start, terminating, tuple(id(a) for _, a in members))
    hit = cache.running.get(memo) if cache is not None and clean else None
    if hit is not None:
        return _Kept(sig, keep, g, hit[0], "", _held(b, members))
    w = g.workload
    set_of = {k: ps.name for ps, ks in zip(w.pod_sets, g.sets, strict=True) for k in ks}
    placed: list[PodAssignment] = []
    for k, ok, (pod, a) in zip(g.pods, claimed, members, strict=True):
        got = a if ok else b.fallback(k, pod)
        if got is None:
            continue
        flavors = {b.cluster.slices[s].flavor for s in got.slices}
        flavor = flavors.pop() if len(flavors) == 1 else None
        placed.append(
            PodAssignment(k, set_of[k], got.node, got.slices, flavor, got.shared_memory_mib)
        )
    rw = RunningWorkload(w, tuple(placed), start, terminating)
    if cache is not None and clean:
        cache.running[memo] = (rw, g, tuple(a for _, a in members))
    return _Kept(sig, keep, g, rw, "", _held(b, members) if clean else {})


def _held(b: SliceClaims, members: Sequence[Bound]) -> dict[str, Allocation]:
    return {s: b.allocs[s] for _, a in members if a is not None for s in a.slices}


def _section(done: Sequence[tuple[GroupKey, _Kept]]) -> BoundSection:
    out = BoundSection()
    for gk, k in done:
        if k.running is None:
            for pod_key in k.group.pods:
                out.orphans[pod_key] = k.why
            continue
        out.running.append(k.running)
        out.running_by_key[gk] = k.running
        out.running_pods[k.running.workload.id] = k.group.pods
        out.bound_count[gk] = len(k.group.pods)
    return out
