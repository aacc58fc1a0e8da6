"""The fragmentation model (`engine.fragment`) as the Placer's node choice.

For whole and shared (time-slicing, MPS) flavors, and for pods that ask for no GPU, the Placer
scores every feasible node at once with the model: the choice that strands the least GPU
capacity for the recent demand mix, counting what each request type may use where it may go.

- *Access classes*: nodes of one pool with the same taints admit the same request types. A
  type's classes are those whose first node passes its selectors, affinity and tolerations
  (a selector on a per-node label, such as a hostname, is judged on that node only: it
  weighs the demand, never decides feasibility, which is checked per node).
- *Types*: a pod of a whole flavor is (CPU, GPUs, 1000); a shared one (CPU, 1, its replicas'
  share of the GPU). A gang that must share one node and asks one whole GPU per pod is one
  type: (its CPU, its pods, 1000), placed as one request.
- *Demand*: the cycle's pending and running pods (`set_demand`): a function of the snapshot,
  so the weights follow the queue as it changes and a reused engine decides as a fresh one;
  the model adds a whole-node pod of each node shape (`fragment.whole_node_prior`).
  The model is rebuilt when the mix changes (its tables cost types x GPU shapes).

Scores combine with the profile's other weights: the model's gain is scaled to the 0-100 range
of binpack and spread by the request's size, so `fragmentation: 1` alone is the model's choice.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from gpucarve.core.amounts import FlavorName
from gpucarve.core.policy import ScoringWeights
from gpucarve.core.workload import GpuKind, PodSet, TopologyMode, Workload
from gpucarve.engine.node_state import NodeState
from gpucarve.engine.placement import fragment
from gpucarve.engine.placement.fragment import RequestType
from gpucarve.engine.placement.plugins import Binpack, Fragmentation, PodNeeds, Spread
from gpucarve.engine.working import Working

MILLI = 1000
SEEN_LIMIT = 200_000  # memo entries kept before they are dropped
CANDIDATE_LISTS = 256  # candidate arrays kept (each as long as a flavor's nodes)
CACHE_LIMIT = 256  # requests whose scores are kept
STATES_LIMIT = 4096  # node states a request's scores keep before they are worked out anew
# a request whose candidates changed by more than 1 in this many is grouped anew (vectorised)
# rather than moved node by node
MOVED_AT_MOST = 8
CPU_CAP = fragment.MAX_SPEC_CPU * 64  # CPU beyond this scores as this much
TIE = 1e-9  # relative: scores this close are a tie (float sums of the same terms differ)


def near_best(score: npt.NDArray[np.float64]) -> npt.NDArray[np.bool_]:
    top = float(score.max())
    out: npt.NDArray[np.bool_] = score >= top - TIE * max(1.0, abs(top))
    return out


Passes = Callable[[PodSet, NodeState], bool]  # the static filters (selectors, taints)


@dataclass(frozen=True, slots=True)
class Choice:
    score: float
    node: int
    gpu: int | None  # for a share: the GPU (index on the node) the model picked


RunningKey = tuple[PodSet, "str | None", int, int]  # Working.running_demand's keys
ScoresKey = tuple[RequestType, int, int, ScoringWeights]  # a request: type, pods, memory
Typed = tuple[RequestType, int]  # a request type and how many pods it stands for


class ModelState:
    """What the model keeps while a working state lives: nodes, labels and taints do not
    change under it, so classes and types computed once stay right."""

    def __init__(self, ws: Working) -> None:
        rows = ws.gpu_rows
        cls, ids = fragment.access_classes([(n.pool, n.taints) for n in ws.nodes])
        self.cls = np.asarray(cls, dtype=np.int64)
        self.classes = max(1, len(ids))
        self.first = [0] * self.classes  # a node standing for each class
        for i in range(len(ws.nodes) - 1, -1, -1):
            self.first[cls[i]] = i
        gpus = (rows.rows >= 0).sum(axis=1)
        cpu = np.asarray(
            [n.cpu.or_int() for n in ws.cluster.nodes],
            dtype=np.int64,
        )
        self.capacity = fragment.Reach.of(self.cls, cpu, gpus, gpus.astype(np.float64) * MILLI)
        self.access: dict[tuple[object, ...], frozenset[int] | None] = {}
        self.masks: dict[tuple[object, ...], npt.NDArray[np.bool_]] = {}
        # (flavor, the mask's key) -> the candidate nodes without a group: one array per
        # request, so cached scores recognise it by identity
        self.candidates: dict[tuple[object, ...], npt.NDArray[np.intp]] = {}
        self.running: dict[RunningKey, Typed | None] = {}
        self.pending: dict[str, tuple[Workload, list[tuple[RequestType, int]]]] = {}
        # (queue, topology, pod sets) -> the same types, for every workload of that kind
        self.kinds: dict[tuple[object, ...], list[tuple[RequestType, int]]] = {}
        self.model: tuple[Any, fragment.FragmentModel] | None = None
        # each request's scores, kept across cycles: the nodes changed since are known
        # (`GpuRows.touched`), and a new model rescores their states, not the nodes
        self.scores: dict[ScoresKey, _Scores] = {}


StateKey = tuple[bytes, int, int]  # a node's free milli per GPU, CPU (capped) and class


@dataclass
class _Scores:
    """One request's scores over one candidate array, kept by node state: a node's score
    depends only on its state (free milli per GPU, CPU, class) and the model, and on a large
    cluster thousands of candidates share a few dozen states. Nodes that change move between
    states (a new state is scored alone); a new model rescores the states, not the nodes."""

    model: fragment.FragmentModel
    epoch: int
    seen: int  # how much of `GpuRows.touched` these scores have taken in
    candidates: npt.NDArray[np.intp]
    of: npt.NDArray[np.intp]  # each candidate's state; -1: the request does not fit it
    # the states by key, made when a node first moves (a state per node on a cluster whose
    # nodes differ: most scores are grouped anew before any node moves)
    ids: dict[StateKey, int] | None
    rows: npt.NDArray[np.int64]  # per state
    cpu: npt.NDArray[np.int64]
    cls: npt.NDArray[np.int64]
    count: npt.NDArray[np.int64]  # candidates in each state: states emptied are not scored
    valid: npt.NDArray[np.bool_]  # whether a state's score is under `model`
    state_score: npt.NDArray[np.float64]
    state_gpu: npt.NDArray[np.intp]
    score: npt.NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))
    gpu: npt.NDArray[np.intp] = field(default_factory=lambda: np.zeros(0, dtype=np.intp))

    def add(self, added: Sequence[tuple[npt.NDArray[np.int64], int, int]]) -> None:
        """New states, empty and not scored."""
        n = len(added)
        self.rows = np.concatenate([self.rows, np.stack([r for r, _, _ in added])])
        self.cpu = np.concatenate([self.cpu, np.asarray([c for _, c, _ in added], np.int64)])
        self.cls = np.concatenate([self.cls, np.asarray([k for _, _, k in added], np.int64)])
        self.count = np.concatenate([self.count, np.zeros(n, dtype=np.int64)])
        self.valid = np.concatenate([self.valid, np.zeros(n, dtype=np.bool_)])
        self.state_score = np.concatenate([self.state_score, np.full(n, -np.inf)])
        self.state_gpu = np.concatenate([self.state_gpu, np.full(n, -1, dtype=np.intp)])

    def spread(self) -> None:
        """Every candidate's score and GPU from its state's."""
        inside = self.of >= 0
        at = np.where(inside, self.of, 0)
        if len(self.state_score):
            self.score = np.where(inside, self.state_score[at], -np.inf)
            self.gpu = np.where(inside, self.state_gpu[at], -1).astype(np.intp)
        else:
            self.score = np.full(len(self.of), -np.inf)
            self.gpu = np.full(len(self.of), -1, dtype=np.intp)


def _positions(candidates: npt.NDArray[np.intp], nodes: list[int]) -> npt.NDArray[np.intp]:
    """Where `nodes` (any order, repeats, some not candidates) sit in the ascending
    `candidates`, each once."""
    distinct = set(nodes)
    if len(distinct) == 1:  # the common case: one node changed (once per GPU it touched)
        node = distinct.pop()
        at = int(candidates.searchsorted(node))
        hit = at < len(candidates) and int(candidates[at]) == node
        return np.arange(at, at + 1 if hit else at, dtype=np.intp)
    want = np.asarray(sorted(distinct), dtype=np.intp)  # few: cheaper than np.unique
    pos = np.searchsorted(candidates, want)
    inside = pos < len(candidates)
    pos, want = pos[inside], want[inside]
    out: npt.NDArray[np.intp] = pos[candidates[pos] == want]
    return out


def _pick(
    score: npt.NDArray[np.float64], cand: npt.NDArray[np.intp], gpu: npt.NDArray[np.intp]
) -> Choice | None:
    if len(score) == 0:
        return None
    # the array methods and ufunc reduce, not their np.* wrappers: this runs once per pod
    top = float(np.maximum.reduce(score))
    if math.isfinite(top):  # the common case, in two passes over the scores
        best = int((score >= top - TIE * max(1.0, abs(top))).argmax())
    else:  # every candidate refused (-inf), or a score that is not a number
        finite = np.where(np.isfinite(score), score, -np.inf)
        if not np.isfinite(finite).any():
            return None
        best = int(np.flatnonzero(near_best(finite))[0])
    return Choice(float(score[best]), int(cand[best]), int(gpu[best]) if gpu[best] >= 0 else None)


class ModelPlacer:
    def __init__(self, ws: Working, weights: ScoringWeights, static: Passes) -> None:
        self.ws = ws
        self.weights = weights
        # the weights the batch score adds up, looked up once (a ScoringWeights is a tuple)
        self._frag, self._binpack, self._spread = (
            weights[p.name] for p in (Fragmentation, Binpack, Spread)
        )
        self.static = static
        state = ws.gpu_rows.model_state
        if not isinstance(state, ModelState):
            state = ws.gpu_rows.model_state = ModelState(ws)
        self.state = state
        self.cls, self.classes = state.cls, state.classes
        # pods per request type the model weighs: the driver sets it (the cycle: its pending
        # and running pods), always as a new mapping, never by changing the one set before:
        # `model()` looks the model up by its identity (read-only here, so mypy refuses a
        # change in place)
        self.demand: Mapping[RequestType, int] = Counter()
        self._model_for: tuple[Mapping[RequestType, int], fragment.FragmentModel] | None = None
        self._cache = state.scores

    @property
    def active(self) -> bool:
        return self._frag > 0

    # ------------------------------------------------------------------ demand
    def type_of(self, ps: PodSet, needs: PodNeeds | None, gang: int = 1) -> Typed | None:
        """The request type of one pod of `ps`, or of a one-node gang of `gang` such pods when
        each takes whole GPUs (or none), and how many pods the type stands for."""
        if ps.gpu.kind is GpuKind.NONE:
            return RequestType(ps.cpu_milli * gang, 0, 0, self._classes_of(ps)), gang
        if needs is None:
            return None
        return self._typed(ps, needs.flavor, needs.slices, gang)

    def _typed(self, ps: PodSet, flavor: FlavorName | None, slices: int, gang: int) -> Typed | None:
        if flavor is None or flavor not in self.ws.gpu_rows.modelled:
            return None
        access = self._classes_of(ps)
        info = self.ws.flavors[flavor]
        if info.shared:
            milli = slices * MILLI // max(1, info.flavor.replicas)
            if milli < MILLI:
                return RequestType(ps.cpu_milli, 1, milli, access), 1
            return RequestType(ps.cpu_milli * gang, gang, MILLI, access), gang
        return RequestType(ps.cpu_milli * gang, slices * gang, MILLI, access), gang

    def set_demand(
        self,
        pending: Sequence[Workload],
        needs_of: Callable[[Workload], Sequence[PodNeeds | None]],
    ) -> None:
        """The demand of a cycle: its pending workloads and the running ones (a function of
        the snapshot, so a reused engine decides as a fresh one)."""
        st = self.state
        mix: Counter[RequestType] = Counter()
        for key, n in self.ws.running_demand.items():
            if n <= 0:
                continue
            if key not in st.running:
                st.running[key] = self._typed(key[0], key[1], key[2], key[3])
            typed = st.running[key]
            if typed is not None:
                mix[typed[0]] += n
        if len(st.pending) > SEEN_LIMIT:
            st.pending.clear()
        if len(st.kinds) > SEEN_LIMIT:
            st.kinds.clear()
        for w in pending:
            hit = st.pending.get(w.id)
            if hit is None or hit[0] is not w:
                # what a workload's types depend on: its queue's flavors, its topology and pods
                kind = (w.queue, w.topology, w.pod_sets)
                types = st.kinds.get(kind)
                if types is None:
                    types = st.kinds[kind] = self.workload_types(w, needs_of(w))
                hit = st.pending[w.id] = (w, types)
            for t, n in hit[1]:
                mix[t] += n
        self.demand = mix

    def workload_types(
        self, w: Workload, needs: Sequence[PodNeeds | None]
    ) -> list[tuple[RequestType, int]]:
        """(type, how many) for a workload's pods."""
        one_node = w.topology is TopologyMode.NODE and len(w.pod_sets) == 1
        out = []
        for ps, n in zip(w.pod_sets, needs, strict=True):
            typed = self.type_of(ps, n, ps.count if one_node else 1)
            if typed is not None and typed[0].num_gpu:
                out.append((typed[0], ps.count // typed[1]))
        return out

    def _classes_of(self, ps: PodSet) -> frozenset[int] | None:
        st = self.state
        key = (ps.node_selector, ps.affinity, ps.tolerations, ps.gpu.kind is GpuKind.NONE)
        if key not in st.access:
            nodes = self.ws.nodes
            ok = [c for c in range(self.classes) if self.static(ps, nodes[st.first[c]])]
            st.access[key] = None if len(ok) == self.classes else frozenset(ok)
        return st.access[key]

    def _static_mask(self, ps: PodSet) -> npt.NDArray[np.bool_]:
        st = self.state
        key = (ps.node_selector, ps.affinity, ps.tolerations, ps.gpu.kind is GpuKind.NONE)
        mask = st.masks.get(key)
        if mask is None:
            if len(st.masks) > SEEN_LIMIT:
                st.masks.clear()
            mask = np.asarray([self.static(ps, n) for n in self.ws.nodes], dtype=bool)
            st.masks[key] = mask
        return mask

    def model(self) -> fragment.FragmentModel:
        """The model of the cycle's demand: looked up by the demand itself (set once a cycle,
        never changed), not by its sorted key, which every score asked for."""
        hit = self._model_for
        if hit is not None and hit[0] is self.demand:
            return hit[1]
        st = self.state
        st.model = fragment.model_of(
            self.demand, self.classes, st.model, st.capacity, self.ws.gpu_rows.width
        )
        self._model_for = (self.demand, st.model[1])
        return st.model[1]

    # ------------------------------------------------------------------ choice
    def best(
        self,
        needs: PodNeeds,
        candidates: npt.NDArray[np.intp],
        gang: int = 1,
        excluded: set[int] | None = None,
    ) -> Choice | None:
        """The best node among `candidates` (ascending indices that pass the static filters,
        reservations and, for a gang, hold it) for one pod of `needs`, or for a one-node gang
        of `gang` of them; ties go to the lowest index."""
        typed = self.type_of(needs.pod_set, needs, gang)
        if typed is None or len(candidates) == 0:
            return None
        t, pods = typed
        score, gpu_of = self._scores(needs, candidates, t, pods)
        if excluded:
            out = np.asarray([int(i) in excluded for i in candidates], dtype=bool)
            score = np.where(out, -np.inf, score)
        return _pick(score, candidates, gpu_of)

    def best_each(
        self, needs: Sequence[PodNeeds], candidates: Sequence[npt.NDArray[np.intp]], gang: int
    ) -> list[Choice | None]:
        """`best` for each of several flavors of one pod set, scored in one pass when the
        request is the same on each (a node serves one such flavor)."""
        typed = [self.type_of(n.pod_set, n, gang) for n in needs]
        first = typed[0]
        if first is None or any(t != first for t in typed):
            return [self.best(n, c, gang) for n, c in zip(needs, candidates, strict=True)]
        t, pods = first
        union = np.concatenate(candidates) if candidates else np.zeros(0, dtype=np.intp)
        owner = np.concatenate(
            [np.full(len(c), k, dtype=np.intp) for k, c in enumerate(candidates)]
        )
        order = np.argsort(union, kind="stable")
        union, owner = union[order], owner[order]
        out: list[Choice | None] = [None] * len(needs)
        if len(union) == 0:
            return out
        score, gpu_of = self._scores(needs[0], union, t, pods)
        for k in range(len(needs)):
            mine = owner == k
            out[k] = _pick(score[mine], union[mine], gpu_of[mine])
        return out

    def _scores(
        self, needs: PodNeeds, candidates: npt.NDArray[np.intp], t: RequestType, pods: int
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.intp]]:
        """Every candidate's score (-inf where the request does not fit) and GPU pick (-1:
        none). Kept per request, by node state (`_Scores`): when asked again for the same
        candidates, only the nodes changed since are looked at again, and a new model (the
        demand's mix moves every cycle that admits) scores the states, not every candidate.
        The same as `_fresh`: a state's score is worked out as `score_all` works it out."""
        rows = self.ws.gpu_rows
        model = self.model()
        key = (t, pods, needs.mem, self.weights)
        hit = self._cache.get(key)
        if (
            hit is not None
            and hit.epoch == rows.epoch
            and (hit.candidates is candidates or np.array_equal(hit.candidates, candidates))
        ):
            changed = rows.touched[hit.seen :]
            sel = _positions(candidates, changed) if changed else None
            if sel is None or len(sel) * MOVED_AT_MOST <= len(candidates):
                hit.seen = len(rows.touched)
                if self._follow(hit, needs, sel, t, pods, model):
                    return hit.score, hit.gpu
        hit = self._states(needs, candidates, t, pods, model)
        if len(self._cache) >= CACHE_LIMIT:
            self._cache.clear()
        self._cache[key] = hit
        return hit.score, hit.gpu

    def _states(
        self,
        needs: PodNeeds,
        candidates: npt.NDArray[np.intp],
        t: RequestType,
        pods: int,
        model: fragment.FragmentModel,
    ) -> _Scores:
        """The candidates grouped by state, as `score_all` groups those that fit, and scored."""
        g = self.ws.gpu_rows
        ok = self._fits(needs, candidates, t, pods)
        of = np.full(len(candidates), -1, dtype=np.intp)
        rows = g.rows[candidates[ok]]
        cpu = np.minimum(g.cpu[candidates[ok]], CPU_CAP)
        cls = self.cls[candidates[ok]]
        if len(rows) >= 2:
            first, inverse = fragment.same_states(rows, cpu, cls)
        else:  # one node is its own state
            first = inverse = np.zeros(len(rows), dtype=np.intp)
        of[ok] = inverse
        rows, cpu, cls = rows[first], cpu[first], cls[first]
        n = len(rows)
        count = np.bincount(inverse, minlength=n).astype(np.int64)
        hit = _Scores(model, g.epoch, len(g.touched), candidates, of, None, rows, cpu, cls, count,
                      np.zeros(n, dtype=np.bool_), np.full(n, -np.inf),
                      np.full(n, -1, dtype=np.intp))  # fmt: skip
        self._score_states(hit, t)
        hit.spread()
        return hit

    def _follow(
        self,
        hit: _Scores,
        needs: PodNeeds,
        sel: npt.NDArray[np.intp] | None,
        t: RequestType,
        pods: int,
        model: fragment.FragmentModel,
    ) -> bool:
        """Bring `hit` up to the nodes changed at `sel` and to `model`; False when it keeps
        too many states to be worth keeping."""
        moved = self._move(hit, needs, sel, t, pods) if sel is not None and len(sel) else []
        if len(hit.rows) > STATES_LIMIT:
            return False
        if hit.model is not model:
            hit.model = model
            hit.valid[:] = False
            self._score_states(hit, t)
            hit.spread()
            return True
        states = [int(hit.of[pos]) for pos in moved]
        todo = sorted({sid for sid in states if sid >= 0 and not hit.valid[sid]})
        if todo:  # states nodes moved into, not scored yet
            self._score_states(hit, t, np.asarray(todo, dtype=np.intp))
        for pos, sid in zip(moved, states, strict=True):
            if sid >= 0:
                hit.score[pos], hit.gpu[pos] = hit.state_score[sid], hit.state_gpu[sid]
            else:
                hit.score[pos], hit.gpu[pos] = -np.inf, -1
        return True

    def _move(
        self, hit: _Scores, needs: PodNeeds, sel: npt.NDArray[np.intp], t: RequestType, pods: int
    ) -> list[int]:
        """The candidates at `sel` into the states they are in now (new states are added);
        their positions. Node by node in plain Python: a few nodes moved is the common case,
        and NumPy's cost per call outweighs the work on so few."""
        g = self.ws.gpu_rows
        ids = hit.ids
        if ids is None:
            keys = zip(hit.rows, hit.cpu.tolist(), hit.cls.tolist(), strict=True)
            ids = hit.ids = {(r.tobytes(), c, k): i for i, (r, c, k) in enumerate(keys)}
        need_mem, share = needs.mem * pods, t.num_gpu and t.milli < MILLI
        added: list[tuple[npt.NDArray[np.int64], int, int]] = []
        into: list[int] = []
        positions: list[int] = sel.tolist()
        for pos in positions:
            n = int(hit.candidates[pos])
            old = int(hit.of[pos])
            if old >= 0:
                hit.count[old] -= 1
            row, cpu = g.rows[n], int(g.cpu[n])
            fits = cpu >= t.cpu and int(g.mem[n]) >= need_mem  # as `_fits` judges
            if fits and t.num_gpu:
                free = row.tolist()
                fits = (
                    any(v >= t.milli for v in free)
                    if share
                    else sum(v == MILLI for v in free) >= t.num_gpu
                )
            if not fits:
                hit.of[pos] = -1
                continue
            key = (row.tobytes(), min(cpu, CPU_CAP), int(self.cls[n]))
            sid = ids.get(key)
            if sid is None:
                sid = ids[key] = len(ids)
                added.append((row.copy(), key[1], key[2]))
            hit.of[pos] = sid
            into.append(sid)
        if added:
            hit.add(added)
        for sid in into:
            hit.count[sid] += 1
        return positions

    def _score_states(
        self, hit: _Scores, t: RequestType, todo: npt.NDArray[np.intp] | None = None
    ) -> None:
        """Score the states `todo` (by default every one that holds candidates and has no
        score under `hit.model`) as `score_all` scores them."""
        if todo is None:
            todo = np.flatnonzero(~hit.valid & (hit.count > 0))
        if not len(todo):
            return
        rows, cpu, cls = hit.rows[todo], hit.cpu[todo], hit.cls[todo]
        gain, choice = hit.model.score_one_each(rows, cpu, cls, t.cpu, t.num_gpu, t.milli)
        hit.state_score[todo] = self._combine(gain, rows, t)
        if choice is not None:
            hit.state_gpu[todo] = choice
        hit.valid[todo] = True

    def _fits(
        self, needs: PodNeeds, candidates: npt.NDArray[np.intp], t: RequestType, pods: int
    ) -> npt.NDArray[np.bool_]:
        """Which candidates the request fits (CPU, memory, and its GPUs)."""
        g = self.ws.gpu_rows
        ok: npt.NDArray[np.bool_] = (g.cpu[candidates] >= t.cpu) & (
            g.mem[candidates] >= needs.mem * pods
        )
        if t.num_gpu and t.milli < MILLI:
            ok &= (g.rows[candidates] >= t.milli).any(axis=1)
        elif t.num_gpu:
            ok &= (g.rows[candidates] == MILLI).sum(axis=1) >= t.num_gpu
        return ok

    def _fresh(
        self, needs: PodNeeds, candidates: npt.NDArray[np.intp], t: RequestType, pods: int
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.intp]]:
        score = np.full(len(candidates), -np.inf)
        gpu = np.full(len(candidates), -1, dtype=np.intp)
        scored = self.score_all(needs, candidates, t, pods)
        if scored is not None:
            s, cand, g = scored
            pos = np.searchsorted(candidates, cand)
            score[pos] = s
            if g is not None:
                gpu[pos] = g
        return score, gpu

    def score_all(
        self,
        needs: PodNeeds,
        candidates: npt.NDArray[np.intp],
        t: RequestType,
        pods: int,
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.intp], npt.NDArray[np.intp] | None] | None:
        """Scores of the candidates that fit `t` (and those candidates, and for a share the
        GPU on each), or None when none fits."""
        gpu_rows = self.ws.gpu_rows
        cpu = gpu_rows.cpu[candidates]
        mem = gpu_rows.mem[candidates]
        rows = gpu_rows.rows[candidates]
        ok = (cpu >= t.cpu) & (mem >= needs.mem * pods)
        if t.num_gpu and t.milli < MILLI:
            ok &= (rows >= t.milli).any(axis=1)
        elif t.num_gpu:
            ok &= (rows == MILLI).sum(axis=1) >= t.num_gpu
        if not ok.any():
            return None
        cand = candidates[ok]
        rows, cpu = rows[ok], cpu[ok]
        # scored per distinct node state, the weights added per state too: on a large cluster
        # thousands of candidates share a few dozen states
        first, inverse, gain, gpu_choice = self.model().score_states(
            rows, np.minimum(cpu, CPU_CAP), self.cls[cand], t.cpu,
            t.num_gpu, t.milli,
        )  # fmt: skip
        score = self._combine(gain, rows[first], t)[inverse]
        return score, cand, (gpu_choice[inverse] if gpu_choice is not None else None)

    def _combine(
        self, gain: npt.NDArray[np.float64], rows: npt.NDArray[np.int64], t: RequestType
    ) -> npt.NDArray[np.float64]:
        frag, binpack, spread = self._frag, self._binpack, self._spread
        size = max(1, t.num_gpu * t.milli)
        score = frag * 100.0 * gain / size
        if (binpack or spread) and t.num_gpu:
            total = (rows >= 0).sum(axis=1) * MILLI
            free = np.where(rows > 0, rows, 0).sum(axis=1)
            used = np.where(total > 0, 100.0 * (total - (free - size)) / np.maximum(total, 1), 0)
            score = score + binpack * used + spread * (100.0 - used)
        return np.asarray(score, dtype=np.float64)

    def candidates(self, needs: PodNeeds, group: list[int] | None) -> npt.NDArray[np.intp]:
        """Nodes that serve the flavor (all nodes for CPU-only pods), pass the static filters,
        and lie in `group` when there is one."""
        rows = self.ws.gpu_rows
        if group is not None:
            # ascending and unique, as an intersection with the flavor's nodes would give
            base = np.unique(np.asarray(group, dtype=np.intp))
            if needs.flavor is not None:
                serves = rows.serves.get(needs.flavor)
                base = base[serves[base]] if serves is not None else base[:0]
            return base[self._static_mask(needs.pod_set)[base]]
        ps = needs.pod_set
        key = (needs.flavor, ps.node_selector, ps.affinity, ps.tolerations, ps.gpu.kind)
        cached = self.state.candidates.get(key)
        if cached is None:
            if len(self.state.candidates) > CANDIDATE_LISTS:
                self.state.candidates.clear()
            if needs.flavor is None:
                base = np.arange(len(self.ws.nodes), dtype=np.intp)
            else:
                base = rows.nodes_of.get(needs.flavor, np.zeros(0, dtype=np.intp))
            cached = base[self._static_mask(ps)[base]]
            cached.flags.writeable = False  # shared by every request of the key
            self.state.candidates[key] = cached
        return cached
