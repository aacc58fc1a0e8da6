"""The scheduler's snapshot, rebuilt from the API server's objects before every cycle.

Nothing lives only in the scheduler's memory: a restarted scheduler builds the same view. Bound
pods of gpucarve (spec.nodeName set) are running workloads; the slices each holds come from the
`gpucarve.io/assignment` annotation written at binding. Pods that hold GPUs without it (bound by
another scheduler, or by hand) take the first free slices of the resource they request on their
node, so capacity is never promised twice. A gang whose pods were bound in part before a crash
runs with those pods; the rest wait as `<group>+rest`, needing what the group's minimum still
lacks. `assumed` holds bindings this process made that the watch has not shown yet.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import islice
from types import MappingProxyType
from typing import Any

from gpucarve.config.device_select import Device
from gpucarve.core.amounts import FlavorName
from gpucarve.core.policy import DeviceApi, Policy
from gpucarve.core.snapshot import Snapshot
from gpucarve.core.workload import (
    PartialGang,
    PodAssignment,
    PodSet,
    RunningWorkload,
    Workload,
)
from gpucarve.engine import gang_gpus
from gpucarve.kube.view.bound.bound_view import BoundGroups, BoundInputs, claim_bound
from gpucarve.kube.view.bound.held_slices import hold_free
from gpucarve.kube.view.bound.holders import claim_units, expand_shares
from gpucarve.kube.view.bound.slice_claims import SliceClaims
from gpucarve.kube.view.bound.view_step import Layers
from gpucarve.kube.view.nodes.inventory import Inventory
from gpucarve.kube.view.pods.assigned import Assigned
from gpucarve.kube.view.pods.claims import PodClaims, attach_claims, claim_refs, object_key
from gpucarve.kube.view.pods.owner_kinds import awaited_object
from gpucarve.kube.view.pods.pod_facts import PodFacts, PodFactsMemo, gpu_requests
from gpucarve.kube.view.pods.pod_index import PodIndex
from gpucarve.kube.view.pods.pods import GroupSpec, PendingGroup, WorkloadCache, pending_workloads

REST = "+rest"


@dataclass
class View:
    snapshot: Snapshot
    # workload id -> the real pods (namespace/name) of each pod set, as the engine numbers them
    pending_sets: dict[str, tuple[tuple[str, ...], ...]] = field(default_factory=dict)
    # workload id -> its bound pods, for evictions
    running_pods: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # pod -> why it can never be scheduled as it is (bad request, unknown queue…)
    invalid: dict[str, str] = field(default_factory=dict)
    # problems found while rebuilding (a slice claimed twice…): logged by the scheduler
    warnings: list[str] = field(default_factory=list)
    # bound pod -> why it is no workload of the policy (its queue or pool went away with a
    # policy change): it keeps its GPUs, the engine neither counts nor evicts it
    orphans: dict[str, str] = field(default_factory=dict)
    # running gangs short of their minimum whose missing pods do not exist (yet): the
    # scheduler knows since when (`Snapshot.partial` needs it), the API objects do not
    short_running: dict[str, PartialGang] = field(default_factory=dict)
    # bound pod -> how the devices the kubelet gave it differ from gpucarve's assignment
    device_moves: dict[str, str] = field(default_factory=dict)
    # GPU pod of a governed namespace that something else bound -> the queue it is charged to
    elsewhere: dict[str, str] = field(default_factory=dict)
    # what the snapshot is made of, for following it from the last view (`view_step`); None
    # when it cannot be told apart
    layers: Layers | None = None
    # bound pod -> the other pods an allocated ResourceClaim it shares is reserved for
    # (evicting one frees the claim's devices only with the others)
    claim_partners: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # gang kinds whose objects pending pods wait for (none read: a CRD not discovered yet?)
    awaiting: frozenset[str] = frozenset()

    def evicted_with(self, pods: Iterable[str]) -> list[str]:
        """`pods` and every pod sharing an allocated claim with one of them, sorted."""
        out = set(pods)
        for pod in list(out):
            out.update(self.claim_partners.get(pod, ()))
        return sorted(out)

    def pod_of(self, workload: str, engine_pod: str) -> str:
        """The real pod behind the engine's `<workload>/<set>-<i>`."""
        set_name, _, index = engine_pod[len(workload) + 1 :].rpartition("-")
        k = int(set_name.removeprefix("set-"))
        return self.pending_sets[workload][k][int(index)]


def key(pod: Mapping[str, Any]) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"


def _disagrees(w: Workload, spec: GroupSpec | None) -> str | None:
    if spec is None:
        return None
    queue, priority = spec.queue, spec.priority_class
    if queue and queue != w.queue:
        return (
            f"validation/pod-group: the PodGroup names queue {queue!r} but its pods are in "
            f"queue {w.queue!r}; fix: give the pods the same queue, or change spec.queue"
        )
    if priority and priority != w.priority_class:
        return (
            f"validation/pod-group: the PodGroup names priority class {priority!r} but its "
            f"pods use {w.priority_class!r}; fix: set the same priorityClassName on both"
        )
    return None


def build_view(
    policy: Policy,
    inventory: Inventory,
    pods: Sequence[Mapping[str, Any]],
    scheduler_name: str,
    epoch: datetime,
    specs: Mapping[tuple[str, str], GroupSpec],
    assumed: Mapping[str, Assigned] | None = None,
    cache: WorkloadCache | None = None,
    facts: PodFactsMemo | None = None,
    bound: BoundGroups | None = None,
    now: int | None = None,
    claims: Sequence[Mapping[str, Any]] = (),
    index: PodIndex | None = None,
    unread: Mapping[str, int] | None = None,
) -> View:
    """`specs`: per pod group what its PodGroup object asks (minMember, topology, timeout),
    and the queue and priority class its pods must agree with (a gang cannot be charged to
    one queue and claimed by another). `facts`: a scheduler that builds a view every cycle
    passes one memo, so only the pods changed since the last cycle are parsed again, and one
    `bound`, so only the gangs changed since then are worked out again. `now` (seconds from
    `epoch`): a gang short of pods past its timeout says so. `claims`: the ResourceClaims
    (Dynamic Resource Allocation): what pending pods claim, and the devices allocated claims
    hold. `index`: the scheduler's pod index, brought up to date with the informer's changes
    and `assumed` (then `pods` is not read); without one, the view sorts `pods` afresh.
    `unread`: gang kinds whose CRD was not served when the scheduler last looked, with when
    (seconds from `epoch`): their pods made since wait for the next look (`View.awaiting`)."""
    facts = facts if facts is not None and facts.epoch == epoch else PodFactsMemo(epoch)
    of = facts.of
    governed = policy.governed_namespaces()
    if (index is None or index.facts is not facts or index.scheduler_name != scheduler_name
            or index.governed != governed):  # fmt: skip
        index = PodIndex(scheduler_name, facts, governed)
        index.sync_all(pods, assumed or {}, None if bound is None else bound.assumed_pod)
    specs = _with_hints(specs, index)
    min_members = {k: s.min_member for k, s in specs.items()}
    assumed = assumed or {}
    units = claim_units(claims, inventory.dra) if claims else None
    by_claim = expand_shares(units.by_claim, inventory.cluster, policy) if units else {}
    if units is not None and units.by_pod:
        # the devices allocated claims give their pods, first, as the kubelet's would be
        by_pod = expand_shares(units.by_pod, inventory.cluster, policy)
        reported = {**inventory.reported, **by_pod}
        inventory = dataclasses.replace(inventory, reported=MappingProxyType(reported))
    b = SliceClaims(inventory, policy)
    view_invalid: dict[str, str] = {}
    ours_pending, done = index.sorted_pending(), index.done
    allocated = set(units.by_pod) if units else set()
    foreign = index.sorted_foreign([*inventory.reported, *allocated])

    # The devices the kubelet reports first (the real device wins), then the running
    # workloads' slices as annotated (or the first free ones).
    as_reported: list[tuple[Mapping[str, Any], Assigned | None]] | None = None
    moves: dict[str, str] = {}
    if inventory.reported:
        as_reported, moves = b.reported_first(index.sorted_bound())
    inputs = BoundInputs(policy, inventory, epoch, specs, cache, facts)
    section = claim_bound(b, index, inputs, bound, as_reported)
    kept_layer, rewritten = len(b.allocs), b.rewritten
    running, running_pods = section.running, section.running_pods
    bound_count, running_by_key = section.bound_count, section.running_by_key
    orphans = section.orphans
    # DRA: the claims by name, and each DRA flavor's devices (for their selectors)
    by_key = {object_key(c): c for c in claims}
    dra_pools = any(p.devices is DeviceApi.DRA for p in policy.pools)
    devices = inventory.dra_devices if dra_pools else None
    claimed = _Claimed(by_key, devices, inventory.dra_key) if claims else None
    elsewhere = [
        p
        for p in foreign
        if p["metadata"]["namespace"] in governed and (gpu_requests(p) or of(p).key in allocated)
    ]
    charged_ids = {id(p) for p in elsewhere}
    for pod in foreign:
        key = of(pod).key
        if id(pod) not in charged_ids and not b.claim_reported(key, pod, f"foreign:{key}"):
            b.fallback(f"foreign:{key}", pod)
    charged = _charge_elsewhere(b, elsewhere, policy, epoch, cache, of, claimed)
    if charged:  # (the section's are copies already)
        running = (*running, *(rw for rw, _ in charged.values()))
        running_pods.update((rw.workload.id, (k,)) for k, (rw, _) in charged.items())

    # Pending groups; those with pods already bound wait as `<group>+rest` for the remainder.
    # (only gangs with a minimum matter below: no pass over every bound gang)
    with_minimum = sorted(min_members.keys() & bound_count.keys())
    wanted = dict(specs)
    for gk in with_minimum:
        n = bound_count[gk]
        wanted[gk] = dataclasses.replace(wanted[gk], min_member=max(1, min_members[gk] - n))
    # A gang whose pods are not all created yet waits for them (never admitted in part).
    waiting: dict[tuple[str, str], list[str]] = {}
    for p in ours_pending:
        waiting.setdefault(of(p).group, []).append(of(p).key)
    have = Counter({gk: bound_count[gk] + done.get(gk, 0) for gk in with_minimum})
    short = {
        gk: names
        for gk, names in waiting.items()
        if gk in min_members and len(names) + have.get(gk, 0) < min_members[gk]
    }
    # A running gang whose missing pods do not exist at all (deleted, not replaced) is short
    # too: released once its timeout passes.
    short |= {
        gk: []
        for gk, n in sorted(have.items())
        if gk not in waiting and gk in min_members and n < min_members[gk]
    }
    created = {gk: min(of(p).started for p in ours_pending if of(p).group == gk)
               for gk, names in short.items() if names}  # fmt: skip
    short_running = _short_gangs(
        _Short(short, have, running_by_key, min_members, created, specs, now), view_invalid
    )
    ours_pending = [p for p in ours_pending if of(p).group not in short]
    awaiting: set[str] = set()
    for p in ours_pending if unread else ():
        # (a pod of no gang is its own group, named after it; a gang with a spec is read)
        if of(p).group in specs or of(p).group[1] == p["metadata"]["name"]:
            continue
        said = awaited_object(p, specs, unread or {}, of(p).started)
        if said is not None:
            awaiting.add(said[0])
            view_invalid[of(p).key] = said[1]
    if awaiting:
        ours_pending = [p for p in ours_pending if of(p).key not in view_invalid]
    asked: dict[str, PodClaims] = {}
    if claims:
        asked, claim_waits = attach_claims(ours_pending, by_key)
        if claim_waits:
            ours_pending = [p for p in ours_pending if of(p).key not in claim_waits]
        view_invalid.update(claim_waits)
    groups = pending_workloads(
        ours_pending, policy, epoch, wanted, cache, keyed=facts.group, devices=devices,
        seen_devices=inventory.dra_key, claims=asked,
    )  # fmt: skip
    rest = _Rest(wanted, min_members, bound_count, running_by_key)
    pending, pending_sets, partial = _pending(groups, specs, rest, view_invalid)
    hold_free(b.cluster.slices, b.allocs, inventory)
    b.hold_claimed(by_claim)
    # the inventory's node index shared, not rebuilt (a fifth of a view at 5,000 nodes)
    cluster = b.cluster.with_allocations(MappingProxyType(b.allocs))
    changed = {
        gpu: int((datetime.fromisoformat(at) - epoch).total_seconds())
        for gpu, at in inventory.mig_changed_at.items()
    }
    snapshot = Snapshot(
        policy,
        cluster,
        tuple(running),
        tuple(pending),
        mig_changed_at=MappingProxyType(changed),
        partial=MappingProxyType(partial),
    )
    facts.roll()
    return View(
        snapshot,
        pending_sets,
        running_pods,
        view_invalid,
        b.warnings,
        orphans,
        short_running,
        moves,
        {k: q for k, (_, q) in charged.items()},
        _layers(bound, b, kept_layer, rewritten, [rw for rw, _ in charged.values()]),
        units.partners if units is not None else {},
        frozenset(awaiting),
    )


def _layers(
    bound: BoundGroups | None,
    b: SliceClaims,
    kept_layer: int,
    rewritten: int,
    charged: list[RunningWorkload],
) -> Layers | None:
    """The view's layers: the kept gangs' claims came first (`kept_layer` of them, all the
    kept gangs hold) and the rest after, only ever added (`rewritten` unchanged), so the rest
    are the last ones in the claims' order."""
    if bound is None or kept_layer != bound.holding() or b.rewritten != rewritten:
        return None
    rest = islice(reversed(b.allocs.items()), len(b.allocs) - kept_layer)
    other = dict(reversed(list(rest)))
    return Layers(bound.views, bound.changes(), other, tuple(charged))


@dataclass(frozen=True)
class _Short:
    """Gangs with fewer pods than their minimum, and what their messages need."""

    names: Mapping[tuple[str, str], list[str]]  # their pods waiting (none: all bound or gone)
    have: Mapping[tuple[str, str], int]  # bound or completed
    running_by_key: Mapping[tuple[str, str], RunningWorkload]
    min_members: Mapping[tuple[str, str], int]
    created: Mapping[tuple[str, str], int]  # its oldest waiting pod's creation
    specs: Mapping[tuple[str, str], GroupSpec]
    now: int | None


def _short_gangs(s: _Short, view_invalid: dict[str, str]) -> dict[str, PartialGang]:
    """Gangs with fewer pods than their minimum: each pod says so (and whether the gang's
    timeout passed); a running one is short, for the engine's gang timeout."""
    short_running: dict[str, PartialGang] = {}
    for (ns, group), names in s.names.items():
        gk = (ns, group)
        have = len(names) + s.have.get(gk, 0)
        need = s.min_members[gk]
        if (held := s.running_by_key.get(gk)) is not None:
            per_pod = gang_gpus(held.workload) / max(1, len(held.pods))
            short_running[held.workload.id] = PartialGang(
                need - s.have.get(gk, 0), 0, round(per_pod * need)
            )
        message = (
            f"gang/min-member: pod group {ns}/{group} has {have} of its {need} pods "
            "(minMember); waiting for the rest"
        )
        spec = s.specs.get(gk)
        limit = None if spec is None else spec.timeout_s
        if limit is not None and s.now is not None and gk in s.created:
            late = s.now - s.created[gk] - limit
            if late >= 0:
                message += (
                    f"; its scheduleTimeoutSeconds ({limit} s) passed {late} s ago: create "
                    "the missing pods, or lower minMember"
                )
        for pod_key in names:
            view_invalid[pod_key] = message
    return short_running


@dataclass(frozen=True)
class _Rest:
    """What a gang with pods already bound still waits for (`<group>+rest`)."""

    wanted: Mapping[tuple[str, str], GroupSpec]
    min_members: Mapping[tuple[str, str], int]
    bound_count: Mapping[tuple[str, str], int]
    running_by_key: Mapping[tuple[str, str], RunningWorkload]


def _pending(
    groups: Iterable[PendingGroup],
    specs: Mapping[tuple[str, str], GroupSpec],
    rest: _Rest,
    view_invalid: dict[str, str],
) -> tuple[list[Workload], dict[str, tuple[tuple[str, ...], ...]], dict[str, PartialGang]]:
    """The pending workloads the pods make (the invalid ones say why instead), the pods of
    each, and running gangs that are short of pods whose rest now waits."""
    pending: list[Workload] = []
    pending_sets: dict[str, tuple[tuple[str, ...], ...]] = {}
    partial: dict[str, PartialGang] = {}
    for g in groups:
        if g.workload is None:
            why = "; ".join(p.plain() for p in g.problems)
            for pod_key in g.pods:
                view_invalid[pod_key] = why
            continue
        w = g.workload
        if (clash := _disagrees(w, specs.get(group_key_of(w)))) is not None:
            for pod_key in g.pods:
                view_invalid[pod_key] = clash
            continue
        gk = group_key_of(w)
        if gk in rest.bound_count:
            rest_spec = rest.wanted.get(gk)
            w = _rest(w, None if rest_spec is None else rest_spec.min_member)
            rw = rest.running_by_key[gk]
            # Without a minMember the gang was whole when it was bound: later pods join it
            # (a Ray cluster that scales, a replacement) and it never runs short.
            need = rest.min_members.get(gk, 0)
            if rest.bound_count[gk] < need:
                # since its missing pods were created: they came back when it fell short
                whole = gang_gpus(rw.workload) + gang_gpus(w)
                partial[rw.workload.id] = PartialGang(
                    need - rest.bound_count[gk], w.submit_time, whole, w.id
                )
        pending.append(w)
        pending_sets[w.id] = g.sets
    return pending, pending_sets, partial


def _alone(pod: Mapping[str, Any]) -> tuple[str, str]:
    """A pod as a workload of its own, whatever gang its labels name."""
    return str(pod["metadata"]["namespace"]), str(pod["metadata"]["name"])


@dataclass(frozen=True)
class _Claimed:
    """What the cluster's ResourceClaims tell the charging of pods bound elsewhere."""

    claims: Mapping[str, Mapping[str, Any]]  # namespace/name -> ResourceClaim
    devices: Mapping[FlavorName, Sequence[Device]] | None  # each DRA flavor's devices
    devices_key: str  # their fingerprint


def _charge_elsewhere(
    b: SliceClaims,
    pods: Sequence[Mapping[str, Any]],
    policy: Policy,
    epoch: datetime,
    cache: WorkloadCache | None,
    of: Callable[[Mapping[str, Any]], PodFacts],
    claimed: _Claimed | None = None,
) -> dict[str, tuple[RunningWorkload, str]]:
    """GPU pods of governed namespaces that something else bound, each a running workload of
    its own charged to its queue (its devices: those its allocated ResourceClaims hold, else
    the first free slices of its node, as the device plugin hands them out). With the
    policy's `boundElsewhere: keep` gpucarve never preempts one; a pod that is no valid
    workload (another team's queue label…) only holds its slices, as before."""
    keep = policy.scheduling.bound_elsewhere == "keep"
    out: dict[str, tuple[RunningWorkload, str]] = {}
    for pod in pods:
        f = of(pod)
        asked: dict[str, PodClaims] = {}
        if claimed is not None and claim_refs(pod):
            asked, _ = attach_claims([pod], claimed.claims)
            a = b.claim_reported(f.key, pod, f.key)
        else:
            a = b.fallback(f.key, pod)
        devices = claimed.devices if claimed is not None else None
        seen = claimed.devices_key if claimed is not None else None
        (group,) = pending_workloads(
            [pod], policy, epoch, None, cache, keyed=_alone, devices=devices, seen_devices=seen,
            claims=asked,
        )  # fmt: skip
        w = group.workload
        if a is None or w is None or len(w.pod_sets) != 1:
            continue
        flavors = {b.cluster.slices[s].flavor for s in a.slices}
        flavor = flavors.pop() if len(flavors) == 1 else None
        placed = PodAssignment(f.key, w.pod_sets[0].name, a.node, a.slices, flavor,
                               a.shared_memory_mib)  # fmt: skip
        if keep:
            w = dataclasses.replace(w, preemptible=False)
        terminating = bool(pod["metadata"].get("deletionTimestamp"))
        out[f.key] = (RunningWorkload(w, (placed,), f.started, terminating), w.queue)
    return out


def _with_hints(
    specs: Mapping[tuple[str, str], GroupSpec], index: PodIndex
) -> Mapping[tuple[str, str], GroupSpec]:
    """Gang sizes the pods' own labels give (a LeaderWorkerSet's group size), where no
    object says more."""
    hinted = {
        gk: GroupSpec(hint)
        for gk in index.hints
        if gk not in specs and (hint := index.hint_of(gk)) is not None
    }
    return {**hinted, **specs} if hinted else specs


def group_key_of(w: Workload) -> tuple[str, str]:
    namespace, _, name = w.id.partition("/")
    return namespace, name


def _rest(w: Workload, minimum: int | None) -> Workload:
    sets: list[PodSet] = []
    for ps in w.pod_sets:
        m = ps.count if minimum is None or len(w.pod_sets) > 1 else min(minimum, ps.count)
        sets.append(dataclasses.replace(ps, min_count=m))
    return dataclasses.replace(w, id=w.id + REST, pod_sets=tuple(sets))
