"""The bound half of the view: running workloads and the slices they hold, kept gang by gang
between cycles so that a cycle costs what changed rather than every bound pod. A gang's result
(its RunningWorkload, or why it is no workload of the policy, and the slices its pods claimed)
is kept while its pod objects, their assignments and its PodGroup spec are the very ones of the
last cycle; the informer replaces an object on every change, so an unchanged object is an
unchanged pod. The pod index (`pod_index.py`) names the gangs whose pods changed, so only those
are looked at; what the kept gangs make (their running workloads in key order, the slices they
hold) is kept too, and changed gang by gang. Only *clean* gangs are kept: every pod claimed the
slices its assignment names, none took the first free ones. Claims that all succeed do not
depend on their order, so slices of kept gangs plus the new gangs' claims give exactly the
allocations a fresh rebuild gives. When a new gang's claim would not be clean (a slice claimed
twice, a pod without an assignment), or the policy, the inventory or the kubelet's device
reports are involved, the whole bound half is rebuilt in key order, as from scratch.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gpucarve.core.cluster import Allocation
from gpucarve.core.policy import Policy
from gpucarve.core.vocabulary import QUEUE_LABEL, QUEUE_LABELS
from gpucarve.core.workload import PodAssignment, RunningWorkload
from gpucarve.kube.view.bound.slice_claims import SliceClaims
from gpucarve.kube.view.bound.view_step import KeptChanges
from gpucarve.kube.view.nodes.inventory import Inventory
from gpucarve.kube.view.pods.assigned import Assigned
from gpucarve.kube.view.pods.pod_facts import PodFactsMemo
from gpucarve.kube.view.pods.pod_index import PodIndex
from gpucarve.kube.view.pods.pods import GroupSpec, PendingGroup, WorkloadCache, pending_workloads

GroupKey = tuple[str, str]
Bound = tuple[Mapping[str, Any], Assigned | None]


@dataclass
class BoundSection:
    running: tuple[RunningWorkload, ...] = ()  # a tuple, as the snapshot holds it: no copy
    running_pods: dict[str, tuple[str, ...]] = field(default_factory=dict)
    bound_count: dict[GroupKey, int] = field(default_factory=dict)
    running_by_key: dict[GroupKey, RunningWorkload] = field(default_factory=dict)
    orphans: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class _Kept:
    sig: tuple[object, ...]
    spec: GroupSpec | None
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
        self.views = 0  # views made through this object (`Layers.number`)
        # the gangs the view being made dropped and added (None: it forgot them all)
        self._log: tuple[list[_Kept], list[_Kept]] | None = None
        self._forget()

    def _forget(self) -> None:
        """Keep nothing: the next view works every gang out anew."""
        self._kept = {}
        self._with_spec: set[GroupKey] = set()  # kept gangs that have a PodGroup spec
        self._allocs: dict[str, Allocation] = {}  # the slices the kept gangs hold
        # the kept gangs with a running workload, in key order, and those workloads
        self._run_keys: list[GroupKey] = []
        self._run: list[RunningWorkload] = []
        self._made = BoundSection()
        # the pod index the last view followed to the end, all its gangs clean
        self._follows: PodIndex | None = None
        self._log = None  # what the kept gangs were before is not known any more

    def _add(self, gk: GroupKey, k: _Kept) -> None:
        self._kept[gk] = k
        if self._log is not None:
            self._log[1].append(k)
        if k.spec is not None:
            self._with_spec.add(gk)
        self._allocs.update(k.allocs)
        made = self._made
        if k.running is None:
            made.orphans.update((pod_key, k.why) for pod_key in k.group.pods)
            return
        i = bisect.bisect_left(self._run_keys, gk)
        self._run_keys.insert(i, gk)
        self._run.insert(i, k.running)
        made.running_by_key[gk] = k.running
        made.running_pods[k.running.workload.id] = k.group.pods
        made.bound_count[gk] = len(k.group.pods)

    def _drop(self, gk: GroupKey) -> None:
        k = self._kept.pop(gk)
        if self._log is not None:
            self._log[0].append(k)
        self._with_spec.discard(gk)
        for sid in k.allocs:
            del self._allocs[sid]
        made = self._made
        if k.running is None:
            for pod_key in k.group.pods:
                del made.orphans[pod_key]
            return
        i = bisect.bisect_left(self._run_keys, gk)
        del self._run_keys[i], self._run[i]
        del made.running_by_key[gk], made.bound_count[gk]
        del made.running_pods[k.running.workload.id]

    def changes(self) -> KeptChanges | None:
        """What the kept gangs gave back and took while the last view was made (None: they
        were worked out anew, or the view claimed more than they hold)."""
        if self._log is None:
            return None
        dropped, added = self._log
        return KeptChanges(
            tuple(a for k in dropped for a in k.allocs.values()),
            tuple(a for k in added for a in k.allocs.values()),
            tuple(k.running for k in dropped if k.running is not None),
            tuple(k.running for k in added if k.running is not None),
        )

    def holding(self) -> int:
        """How many slices the kept gangs hold."""
        return len(self._allocs)

    def _section(self) -> BoundSection:
        """What the kept gangs make, as a fresh view in key order makes it. The running
        workloads, their pods and the orphans are copies (the caller's view outlives the next
        change); the counts and workloads by gang are this object's own, read only while the
        view is made (copies of them were a tenth of a cycle at 6,000 running pods)."""
        m = self._made
        return BoundSection(
            tuple(self._run), dict(m.running_pods), m.bound_count,
            m.running_by_key, dict(sorted(m.orphans.items())),
        )  # fmt: skip

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
class BoundInputs:
    """What grouping bound pods into workloads depends on, for one view."""

    policy: Policy
    inventory: Inventory
    epoch: datetime
    specs: Mapping[GroupKey, GroupSpec]
    cache: WorkloadCache | None
    facts: PodFactsMemo

    def grouped(self, bound: Sequence[Bound]) -> tuple[list[PendingGroup], dict[str, Bound]]:
        """The workloads of `bound` (in group key order) and each pod's entry by its key."""
        groups = pending_workloads(
            [as_admitted(p, a, self.policy) for p, a in bound], self.policy, self.epoch, self.specs,
            self.cache, keyed=self.facts.group,
        )  # fmt: skip
        return groups, {self.facts.of(p).key: (p, a) for p, a in bound}


def as_admitted(pod: Mapping[str, Any], a: Assigned | None, policy: Policy) -> Mapping[str, Any]:
    """A bound pod as it was admitted: under the queue its assignment records, whatever its
    labels say now (a relabelled running pod stays on its queue's books). An assignment that
    records none (written by an earlier version) keeps the label, unless it names a queue the
    pod's namespace may not use: then the namespace's own queue."""
    meta = pod["metadata"]
    labels = meta.get("labels") or {}
    queue = a.queue if a is not None else ""
    if not queue:
        named = next((labels[k] for k in QUEUE_LABELS if k in labels), None)
        own = [q.name for q in policy.queues if meta.get("namespace") in q.namespaces]
        if named is None or named in own or len(own) != 1:
            return pod
        queue = own[0]
    if labels.get(QUEUE_LABEL) == queue and not any(k in labels for k in QUEUE_LABELS[1:]):
        return pod
    kept = {k: v for k, v in labels.items() if k not in QUEUE_LABELS}
    return {**pod, "metadata": {**meta, "labels": {**kept, QUEUE_LABEL: queue}}}


def claim_bound(
    b: SliceClaims,
    index: PodIndex,
    inputs: BoundInputs,
    kept: BoundGroups | None,
    reported: Sequence[Bound] | None = None,
) -> BoundSection:
    """Claim the bound pods' slices in `b` and make their running workloads. `reported`:
    the bound pods with the devices the kubelet reports (`SliceClaims.reported_first`), in
    key order; then every gang is worked out anew, as whenever nothing is kept."""
    if kept is not None:
        kept.views += 1
    if kept is None or reported is not None:
        if kept is not None:
            kept._forget()
            index.take_changed()
        ours = reported if reported is not None else index.sorted_bound()
        return _rebuild(b, ours, inputs, None)
    changed = index.take_changed()
    # the log starts before any forgetting, which ends it (`_forget`); claims the view made
    # before this half (none, as `build_view` calls it) would be no kept gang's: no log
    kept._log = None if b.allocs else ([], [])
    last = kept._basis
    if last is None or last[0] is not inputs.policy or last[1] is not inputs.inventory:
        kept._forget()  # a new policy or inventory object: every gang anew
        kept._basis = (inputs.policy, inputs.inventory)
    specs = inputs.specs
    if kept._follows is not index:
        # gangs not kept (not clean, or new) or kept and gone: what an index that did not
        # feed the last view cannot name (after a view that followed this index to the end,
        # every kept gang is one of its gangs and every other one it names as changed)
        changed.update(index.bound.keys() ^ kept._kept.keys())
    kept._follows = None  # until this view is done
    changed.update(
        gk
        for gk in kept._with_spec.union(specs)
        if gk in kept._kept and kept._kept[gk].spec != specs.get(gk)
    )
    redo: list[Bound] = []
    for gk in sorted(changed):
        members = index.bound.get(gk)
        old = kept._kept.get(gk)
        if (
            old is not None
            and members is not None
            and old.sig == _sig(list(members.values()), specs.get(gk))
        ):
            continue  # its pods changed and came back as they were
        if old is not None:
            kept._drop(gk)
        if members is not None:
            redo += members.values()
    # a copy of the kept slices (cloned whole: inserted one by one they cost a fifth of a view)
    b.allocs = kept._allocs.copy() if not b.allocs else {**b.allocs, **kept._allocs}
    groups, by_key = inputs.grouped(redo)
    fresh: list[tuple[GroupKey, _Kept]] = []
    facts = inputs.facts
    for g in groups:
        gk = facts.of(by_key[g.pods[0]][0]).group
        done = _group(g, by_key, b, facts, specs.get(gk), inputs.cache, strict=True)
        if done is None:  # not clean: a fresh rebuild decides it, in key order
            b.reset()
            return _rebuild(b, index.sorted_bound(), inputs, kept)
        fresh.append((gk, done))
    for gk, done in fresh:
        kept._add(gk, done)
    kept.reused, kept.rebuilt = len(kept._kept) - len(fresh), len(fresh)
    kept._follows = index
    return kept._section()


def _rebuild(
    b: SliceClaims, ours_bound: Sequence[Bound], inputs: BoundInputs, kept: BoundGroups | None
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
        kept._forget()
        kept._basis = (inputs.policy, inputs.inventory)
        for gk, k in done:
            if k.sig:
                kept._add(gk, k)
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
        return _Kept(sig, spec, keep, g, None, why, _held(b, members) if clean else {})
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
        return _Kept(sig, spec, keep, g, hit[0], "", _held(b, members))
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
    return _Kept(sig, spec, keep, g, rw, "", _held(b, members) if clean else {})


def _held(b: SliceClaims, members: Sequence[Bound]) -> dict[str, Allocation]:
    return {s: b.allocs[s] for _, a in members if a is not None for s in a.slices}


def _section(done: Sequence[tuple[GroupKey, _Kept]]) -> BoundSection:
    out = BoundSection()
    running: list[RunningWorkload] = []
    for gk, k in done:
        if k.running is None:
            for pod_key in k.group.pods:
                out.orphans[pod_key] = k.why
            continue
        running.append(k.running)
        out.running_by_key[gk] = k.running
        out.running_pods[k.running.workload.id] = k.group.pods
        out.bound_count[gk] = len(k.group.pods)
    out.running = tuple(running)
    return out
