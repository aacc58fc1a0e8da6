"""Gang placement on the working state: every pod of a gang (up to its minimum) or none.

Pods are placed one by one into the working state under a checkpoint; if the gang cannot reach
its minimum the checkpoint is rolled back and nothing was held. With a topology constraint the
whole gang is tried inside one group (node, NVLink domain or rack) at a time.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from gpucarve.core.amounts import FlavorName
from gpucarve.core.policy import ScoringWeights, SliceKind
from gpucarve.core.workload import (
    TOPOLOGY_UNIT,
    GpuKind,
    PodAssignment,
    PodSet,
    TopologyMode,
    Workload,
)
from gpucarve.engine.decisions import PendingReason, Plugin, Stage
from gpucarve.engine.mig.hint import repartition_hint
from gpucarve.engine.node_state import GpuSlots, NodeState
from gpucarve.engine.placement import groups as topology_groups
from gpucarve.engine.placement import plugins
from gpucarve.engine.placement.frag_place import Choice, ModelPlacer
from gpucarve.engine.placement.holds import Hold, senior
from gpucarve.engine.placement.plugins import PodNeeds
from gpucarve.engine.working import Working

MAX_GROUPS_TRIED = 32
SHARED_NODES_PER_RUN = 4


@dataclass(slots=True)
class Rejections:
    """How many candidate nodes each filter refused (by the filter's name), for the pending
    reason."""

    counts: Counter[str]

    def describe(self) -> str:
        if not self.counts:
            return ""
        parts = [f"{n} by {name}" for name, n in sorted(self.counts.items())]
        return "; nodes refused: " + ", ".join(parts)


Chosen = tuple[NodeState, GpuSlots | None] | None
Chooser = Callable[[PodNeeds, list[int] | None, Rejections], Chosen]


def _never_ends(w: Workload) -> int:
    return 0


def _not_guaranteed(w: Workload) -> bool:
    return False


@dataclass(frozen=True)
class PlacerContext:
    """What the cycle tells the placer, fixed for its life: the request shapes seen per flavor
    (slices per pod -> pods, for the fragmentation score), when a workload placed now is
    expected to end, and whether it stays within its queue's nominal quota. The defaults: no
    shapes, nothing ends, nothing guaranteed (a placer outside a cycle)."""

    shapes: Mapping[FlavorName, Counter[int]] = field(default_factory=dict)
    ends_at: Callable[[Workload], int] = _never_ends
    guaranteed: Callable[[Workload], bool] = _not_guaranteed


class Placer:
    def __init__(
        self,
        ws: Working,
        weights: ScoringWeights,
        candidates: int,
        context: PlacerContext | None = None,
    ) -> None:
        self.ws = ws
        self.ctx = context or PlacerContext()
        self.weights = weights
        self.scores = plugins.profile(weights)
        self.candidates = candidates
        self._static: dict[tuple[object, ...], str | None] = {}
        # (node, flavor) -> what a waiting gang's reservation keeps there (engine.reservation);
        # `current` is the workload being placed and `current_end` when it is expected to end
        self.reserved: dict[tuple[int, str], Hold] = {}
        # flavor -> the nodes holds keep it on (ascending), as of `reserved` at a size: holds
        # are only added (setdefault), so its size says when to list them again
        self._held_nodes: tuple[int, dict[str, npt.NDArray[np.intp]]] = (0, {})
        self.current: Workload | None = None
        self.current_end = 0
        # While a reservation looks ahead, earlier reservations hold their nodes outright:
        # their budgets are as of now, not of the later start being tried.
        self.strict_holds = False
        self._current_guaranteed: bool | None = None  # worked out when a hold asks
        self.model = ModelPlacer(ws, weights, self._passes)
        # (pod set, flavor) -> (working state mark, the model's choice) from `preview`
        self._previewed: dict[tuple[int, str | None], tuple[int, Choice | None, PodSet]] = {}

    def _passes(self, ps: PodSet, node: NodeState) -> bool:
        return all(f.filter(ps, node) for f in plugins.STATIC_FILTERS)

    def weighs_batch(self) -> bool:
        """Whether the profile weighs the fragmentation model's batch form (flavor ranking
        asks it then)."""
        return self.model.active

    def set_demand(
        self,
        pending: Sequence[Workload],
        needs_of: Callable[[Workload], Sequence[PodNeeds | None]],
    ) -> None:
        """The cycle's pending work, whose request shapes the batch model weighs."""
        if self.model.active:
            self.model.set_demand(pending, needs_of)

    def _modelled(self, needs: PodNeeds) -> bool:
        return self.model.active and (
            needs.flavor is None or needs.flavor in self.ws.gpu_rows.modelled
        )

    # -------------------------------------------------------------- filters
    def _static_reject(self, needs: PodNeeds, node: NodeState) -> str | None:
        # Keyed by what the static filters read, never by id(): a placer that outlives the
        # pod sets it saw (the fill experiment's) would hand a dead one's verdict to a new
        # pod set given the same id.
        ps = needs.pod_set
        key = (ps.node_selector, ps.affinity, ps.tolerations, ps.gpu.kind is GpuKind.NONE, node.idx)
        if key not in self._static:
            verdict = None
            for f in plugins.STATIC_FILTERS:
                if not f.filter(needs.pod_set, node):
                    verdict = f.name
                    break
            self._static[key] = verdict
        return self._static[key]

    def _node_filters(self, needs: PodNeeds) -> tuple[plugins.NodeFilter, ...]:
        """The node filters with something to check for this pod, in the registry's order."""
        return tuple(f for f in plugins.NODE_FILTERS if f.applies(needs, self))

    def _feasible(
        self,
        needs: PodNeeds,
        node: NodeState,
        rej: Rejections,
        filters: tuple[plugins.NodeFilter, ...],
    ) -> GpuSlots | bool:
        """True, False, or the GPU a filter found room on; the first filter that refuses the
        node is counted in `rej`."""
        why = self._static_reject(needs, node)
        fit: GpuSlots | bool = True
        if why is None:
            for f in filters:
                ok = f.admits(needs, node, self)
                if ok is False:
                    why = f.name
                    break
                if ok is not True:
                    fit = ok
        if why is not None:
            rej.counts[why] += 1
            return False
        return fit

    def begin(self, w: Workload) -> None:
        """`w` is the workload placed from now on (the holds it may pass are judged for it)."""
        self.current = w
        self.current_end = self.ctx.ends_at(w) if self.reserved else 0
        self._current_guaranteed = None

    def _guaranteed(self, w: Workload) -> bool:
        if self._current_guaranteed is None:
            self._current_guaranteed = self.ctx.guaranteed(w)
        return self._current_guaranteed

    def hold(self, key: tuple[int, str], hold: Hold) -> None:
        """Keep (node, flavor) for a waiting gang's reservation; the first hold stays."""
        self.reserved.setdefault(key, hold)

    @contextmanager
    def strictly(self) -> Iterator[None]:
        """While a reservation looks ahead: earlier reservations hold their nodes outright."""
        self.strict_holds = True
        try:
            yield
        finally:
            self.strict_holds = False

    def holds_any(self) -> bool:
        return bool(self.reserved)

    def kept_from(self, node: NodeState, needs: PodNeeds) -> bool:
        """Whether a reservation keeps the workload being placed off this node: it is newer or
        of lower priority than the gang that holds it, and would delay that gang there."""
        flavor = needs.flavor
        if flavor is None:
            return False
        hold = self.reserved.get((node.idx, flavor))
        w = self.current
        if hold is None or w is None or hold.head.id == w.id:
            return False
        if not senior(hold.head, w) or (hold.borrows and self._guaranteed(w)):
            return False
        if self.strict_holds:
            return True
        free = self.ws.index[flavor].count.get(node.idx, 0)
        return not hold.allows(self.current_end, needs.slices, free)

    # -------------------------------------------------------------- one pod
    def _score(self, needs: PodNeeds, free: int, total: int) -> int:
        if needs.flavor is None:
            return 0
        shapes = self.ctx.shapes.get(needs.flavor)
        return sum(w * p.score(free, needs.slices, total, shapes) for w, p in self.scores)

    def _node_order(self, needs: PodNeeds, group: list[int] | None) -> Iterable[Iterable[int]]:
        """Candidate nodes in runs of equal free count (one run per index level).

        Nodes of one run score the same unless they differ in size, so the first feasible node
        of each (free, size) pair stands for the rest of its run: a pod costs one score per
        distinct pair instead of one per node.
        """
        if needs.flavor is None:
            return [group if group is not None else range(len(self.ws.nodes))]
        index = self.ws.index[needs.flavor]
        if group is not None:
            return [[n for n in group if index.count.get(n, 0) >= needs.slices]]
        return index.levels(
            needs.slices, self.weights[plugins.Spread.name] > self.weights[plugins.Binpack.name]
        )

    def _unreserved(self, cand: npt.NDArray[np.intp], needs: PodNeeds) -> npt.NDArray[np.intp]:
        """The candidates no reservation keeps the pod off. Only nodes a hold is on for the
        pod's flavor are asked (`kept_from`), not every candidate."""
        if not self.reserved or needs.flavor is None:
            return cand
        held = self._held_on(needs.flavor)
        if held is None:
            return cand
        # both ascending: the few held nodes are looked up in the candidates (a sort of the
        # whole candidate list per placement, as np.isin does, cost more than the rest)
        pos = np.searchsorted(cand, held)
        inside = pos < len(cand)
        pos = pos[inside]
        pos = pos[cand[pos] == held[inside]]
        nodes = self.ws.nodes
        kept = [int(k) for k in pos if self.kept_from(nodes[int(cand[k])], needs)]
        if not kept:
            return cand
        out: npt.NDArray[np.intp] = np.delete(cand, kept)
        return out

    def _held_on(self, flavor: FlavorName) -> npt.NDArray[np.intp] | None:
        size, by_flavor = self._held_nodes
        if size != len(self.reserved):
            lists: dict[str, list[int]] = {}
            for node, f in self.reserved:
                lists.setdefault(f, []).append(node)
            by_flavor = {f: np.asarray(sorted(v), dtype=np.intp) for f, v in lists.items()}
            self._held_nodes = (len(self.reserved), by_flavor)
        return by_flavor.get(flavor)

    def preview(
        self, w: Workload, plans: Sequence[list[tuple[PodNeeds, int, int]] | None]
    ) -> list[Choice | None]:
        """Where the model would put each one-pod-set plan of a workload (its first pod, or the
        whole gang when it must share a node), without placing it: to rank the workload's
        candidate flavors. None for a plan it does not weigh or cannot place."""
        out: list[Choice | None] = [None] * len(plans)
        self.begin(w)
        self._previewed.clear()  # only the latest preview may stand for a placement
        if w.topology not in (TopologyMode.NONE, TopologyMode.NODE):
            return out
        idx = [k for k, p in enumerate(plans) if p is not None and len(p) == 1]
        idx = [k for k in idx if self._modelled(plans[k][0][0])]  # type: ignore[index]
        if not idx:
            return out
        needs = [plans[k][0][0] for k in idx]  # type: ignore[index]
        gang = plans[idx[0]][0][1] if w.topology is TopologyMode.NODE else 1  # type: ignore[index]
        cands = [self._unreserved(self.model.candidates(n, None), n) for n in needs]
        for k, choice in zip(idx, self.model.best_each(needs, cands, gang), strict=True):
            out[k] = choice
        if gang == 1:
            # the choice stands until the working state changes: placing the winner next
            # need not score again
            mark = self.ws.checkpoint()
            for n, k in zip(needs, idx, strict=True):
                self._previewed[(id(n.pod_set), n.flavor)] = (mark, out[k], n.pod_set)
        return out

    def _by_model(self, needs: PodNeeds, group: list[int] | None, rej: Rejections) -> Chosen:
        """The fragmentation model's node (and GPU): the best of the feasible candidates."""
        ws = self.ws
        cand = self._unreserved(self.model.candidates(needs, group), needs)
        excluded: set[int] = set()
        cached = self._previewed.pop((id(needs.pod_set), needs.flavor), None)
        if group is not None or cached is None or cached[0] != ws.checkpoint():
            cached = None
        elif cached[2] is not needs.pod_set:
            cached = None  # another pod set that was given a dead one's id
        if needs.pod_set.preferred and len(cand):
            cand, cached = self._most_preferred(needs.pod_set, cand), None
        # the filters the model does not apply itself: asked of the node it picks
        unbatched = tuple(f for f in self._node_filters(needs) if not f.batched)
        while True:
            if cached is not None:
                choice, cached = cached[1], None
            else:
                choice = self.model.best(needs, cand, excluded=excluded)
            if choice is None:
                return None
            node = ws.nodes[choice.node]
            refused = next((f for f in unbatched if f.admits(needs, node, self) is False), None)
            if refused is not None:
                rej.counts[refused.name] += 1
                excluded.add(node.idx)
                continue
            gpu: GpuSlots | None = None
            if needs.shared:
                assert needs.flavor is not None
                if choice.gpu is not None:
                    gpu = ws.gpu_rows.slots.get((node.idx, choice.gpu))
                    if gpu is not None and not (
                        gpu.flavor == needs.flavor
                        and len(gpu.free) >= needs.slices
                        and gpu.mem_free >= needs.shared_mem
                    ):
                        gpu = None
                if gpu is None:
                    gpu = plugins.shared_gpu(needs, node)
                if gpu is None:  # the GPU memory promised there is short: try the next node
                    excluded.add(node.idx)
                    continue
            return node, gpu

    def _most_preferred(self, ps: PodSet, cand: npt.NDArray[np.intp]) -> npt.NDArray[np.intp]:
        """The candidates whose labels match the most weight of the pod's preferred terms
        (as kube-scheduler's NodeAffinity score, taken first; the model scores among them)."""
        nodes = self.ws.nodes
        weights = np.asarray([ps.preference(nodes[int(i)].labels) for i in cand])
        out: npt.NDArray[np.intp] = cand[weights == weights.max()]
        return out

    def _assign(
        self, needs: PodNeeds, pod_id: str, node: NodeState, gpu: GpuSlots | None
    ) -> PodAssignment:
        ws = self.ws
        ws.adjust_node(node, -needs.cpu, -needs.mem)
        if needs.flavor is None:
            return PodAssignment(pod_id, needs.pod_set.name, node.name, (), None)
        ordinals = self._take(needs, node, gpu)
        return PodAssignment(
            pod_id,
            needs.pod_set.name,
            node.name,
            tuple(ws.slice_ids[o] for o in ordinals),
            needs.flavor,
            needs.shared_mem,
        )

    def place_pod(
        self, needs: PodNeeds, pod_id: str, group: list[int] | None, rej: Rejections
    ) -> PodAssignment | None:
        """One path for every pod: the choosers the profile gives it, in order, and the first
        node one of them picks. The fragmentation model comes first where it weighs the
        flavor; the weighted plugins after it (when the model finds nothing they also count
        which filter refused each node, for the pending reason)."""
        for choose in self._choosers(needs):
            chosen = choose(needs, group, rej)
            if chosen is not None:
                return self._assign(needs, pod_id, *chosen)
        return None

    def _choosers(self, needs: PodNeeds) -> tuple[Chooser, ...]:
        if self._modelled(needs):
            return (self._by_model, self._by_plugins)
        return (self._by_plugins,)

    def _by_plugins(self, needs: PodNeeds, group: list[int] | None, rej: Rejections) -> Chosen:
        """The weighted score plugins' node (and GPU), nodes taken in runs of equal free
        count; every node refused is counted in `rej` by the filter that refused it."""
        ws = self.ws
        best: tuple[int, int, int] | None = None
        best_gpu: GpuSlots | None = None
        scored: set[tuple[int, int, int]] = set()
        evaluated = 0
        flavor = needs.flavor
        # A shared GPU's fit varies inside a run (the node's fullest fitting GPU); look a
        # little further there, and nowhere beyond the first feasible node otherwise. Nodes of
        # a run differ in how much of a pod's preferred affinity they match: then all count.
        per_run = SHARED_NODES_PER_RUN if needs.shared else 1
        preferred = needs.pod_set.preferred
        limit = self.candidates
        filters = self._node_filters(needs)
        if preferred:
            per_run = limit = len(ws.nodes)
        for run in self._node_order(needs, group):
            in_run = 0
            for n in run:
                node = ws.nodes[n]
                ok = self._feasible(needs, node, rej, filters)
                if ok is False:
                    continue
                in_run += 1
                gpu = ok if isinstance(ok, GpuSlots) else None
                if flavor is None:
                    sig = (0, 0)
                elif gpu is not None:
                    sig = (len(gpu.free), gpu.total)
                else:
                    sig = (ws.index[flavor].count[n], ws.total[(flavor, n)])
                pref = needs.pod_set.preference(node.labels) if preferred else 0
                if (pref, *sig) not in scored:
                    scored.add((pref, *sig))
                    key = (pref, self._score(needs, *sig), -n)
                    if best is None or key > best:
                        best, best_gpu = key, gpu
                    evaluated += 1
                if in_run >= per_run:
                    break
            if evaluated >= limit:
                break
        if best is None:
            return None
        return ws.nodes[-best[2]], best_gpu

    def _take(self, needs: PodNeeds, node: NodeState, gpu: GpuSlots | None) -> list[int]:
        ws = self.ws
        assert needs.flavor is not None
        if gpu is not None:
            return ws.take(gpu, needs.slices, needs.shared_mem)
        gpus = node.gpus[needs.flavor]
        if ws.kind(needs.flavor) is SliceKind.MIG:
            # Fill GPUs that already run instances, keeping empty GPUs whole for repartitioning.
            used = ws.gpu_used
            order = sorted(gpus, key=lambda g: (-used.get((node.idx, g.gpu), 0), g.gpu))
        else:
            order = gpus
        out: list[int] = []
        left = needs.slices
        for g in order:
            if left == 0:
                break
            k = min(left, len(g.free))
            if k:
                out += ws.take(g, k, 0)
                left -= k
        assert left == 0, "index promised more free slices than the node has"
        return out

    # -------------------------------------------------------------- gangs
    def place_gang(
        self, w: Workload, plan: list[tuple[PodNeeds, int, int]]
    ) -> tuple[list[PodAssignment] | None, PendingReason | None]:
        """`plan`: (needs, pods wanted, pods required) per pod set."""
        self.begin(w)
        if w.topology is TopologyMode.NODE:
            # a one-node gang the model can weigh as one request: on the node it picks
            choice = self.preview(w, [plan])[0]
            if choice is not None:
                placed, _ = self._place_in(w, plan, [choice.node])
                if placed is not None:
                    return placed, None
        groups = self.ws.groups_for(w.topology)
        if groups is None:
            return self._place_in(w, plan, None)
        demand: Counter[FlavorName] = Counter()
        for needs, _, need_min in plan:
            if needs.flavor is not None:
                demand[needs.flavor] += needs.slices * need_min
        fitting = topology_groups.fitting(self.ws, w.topology, groups, demand)
        unit = TOPOLOGY_UNIT[w.topology]
        if not groups:
            return None, PendingReason(
                Stage.PLACEMENT, Plugin.TOPOLOGY, f"no node carries a {unit} label", None
            )
        if not fitting:
            best = topology_groups.most_free(self.ws, w.topology, groups, demand)
            wanted = ", ".join(f"{d} {f}" for f, d in sorted(demand.items()))
            return None, PendingReason(
                Stage.PLACEMENT,
                Plugin.TOPOLOGY,
                f"gang needs {wanted} in one {unit}; the best {unit} has {best[0]} free",
                next(iter(sorted(demand)), None),
            )
        fitting.sort(key=lambda t: (t[0], t[1][0]))
        reason: PendingReason | None = None
        for _, g in fitting[:MAX_GROUPS_TRIED]:
            placed, reason = self._place_in(w, plan, g)
            if placed is not None:
                return placed, None
        return None, reason

    def _place_in(
        self, w: Workload, plan: list[tuple[PodNeeds, int, int]], group: list[int] | None
    ) -> tuple[list[PodAssignment] | None, PendingReason | None]:
        ws = self.ws
        cp = ws.checkpoint()
        placed: list[PodAssignment] = []
        for needs, want, need_min in plan:
            rej = Rejections(Counter())
            got = 0
            for i in range(want):
                a = self.place_pod(needs, w.pod_id(needs.pod_set.name, i), group, rej)
                if a is None:
                    break
                placed.append(a)
                got += 1
            if got < need_min:
                ws.rollback(cp)
                return None, self._reason(needs, need_min, got, rej)
        return placed, None

    def reason_for(
        self, needs: PodNeeds, need_min: int, got: int, rej: Rejections
    ) -> PendingReason:
        return self._reason(needs, need_min, got, rej)

    def _reason(self, needs: PodNeeds, need_min: int, got: int, rej: Rejections) -> PendingReason:
        ps = needs.pod_set
        if needs.flavor is None:
            return PendingReason(
                Stage.PLACEMENT,
                Plugin.CPU_MEMORY,
                f"needs {need_min} pods of {ps.cpu_milli}m CPU / {ps.memory_mib} MiB; "
                f"{got} fit{rej.describe()}",
            )
        index = self.ws.index[needs.flavor]
        largest = max((lvl for lvl, b in index.buckets.items() if b), default=0)
        unit = "on one GPU" if needs.shared else "on one node"
        msg = (
            f"gang needs {need_min} pod{'s' if need_min != 1 else ''} × {needs.slices} "
            f"{needs.flavor} {unit}; {got} placed, the most free {unit} is {largest}"
            + rej.describe()
        )
        hint = 0
        if self.ws.kind(needs.flavor) is SliceKind.MIG:
            hint = repartition_hint(self.ws, needs.flavor)
            if hint:
                msg += f"; {hint} GPU{'s' if hint != 1 else ''} could make one by repartitioning"
        # kept off nodes by a filter that names its own reason (a waiting gang's reservation),
        # not by a lack of slices
        plugin = next(
            (f.reason for f in plugins.NODE_FILTERS if f.reason and rej.counts.get(f.name)),
            Plugin.GPU_SLICES,
        )
        return PendingReason(Stage.PLACEMENT, plugin, msg, needs.flavor, hint)
