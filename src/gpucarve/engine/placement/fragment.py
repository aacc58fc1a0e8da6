"""Fragmentation-aware placement: the choice that strands the least GPU capacity for the mix
of requests the cluster is seeing, counting only what each request may use where it may go.

A node is described by its free milli-GPU per GPU (a row of `MAX_GPUS`, -1 where it has no
GPU), its free CPU and its *access class*: nodes of one class admit the same request types
(GPU model, selectors and affinity, taints). A request type is (CPU, GPUs, milli per GPU,
classes it may use), weighted by its share of the demand the caller gives: the engine gives
its pending and running pods, so the weights follow the queue as it changes. With capacity by
node shape, `model_of` adds a whole-node pod of each shape (`whole_node_prior`).

Three measures of stranded capacity, all weighted by demand:

- one pod ahead (fragmentation gradient descent, Weng et al., ATC 2023): for a type `t` a
  node's free GPU capacity is stranded where `t` cannot use it: GPUs with less free than a
  share request needs, partly used GPUs for whole-GPU requests, everything when the node has
  too few free GPUs, lacks the CPU `t` needs, or is of a class `t` may not use;
- filled up (weight `CAPACITY_WEIGHT`): the free capacity a node still holds after taking as
  many pods of `t` as it can, counting per-GPU slots (two 470-milli shares per free GPU) and
  CPU slots (10 free CPUs run one 8-CPU pod, however many GPUs are free). FGD looks one pod
  ahead, so it lets CPU run out under free GPUs one pod at a time; this term sees it coming.
- CPU-starved (weight `CPU_WEIGHT`): the free GPU milli beyond what the node's free CPU can
  feed at the rate the mix allowed on its class asks for (GPU milli per milli-CPU, demand
  weighted). Pods dropped for want of CPU beside a free GPU were most of what separated the
  placement from the bound on the public traces; per type, the filled-up term sees only the
  types whose own CPU runs short, this one sees the node's CPU and GPU drifting apart.

A type allowed on no node adds the same amount to every node and so changes no choice; a node
only constrained types may use counts as fragmented for everyone else, so unconstrained work is
steered away from capacity that only some requests can use.

Types are sorted by CPU so that "the types this node's CPU cannot host" is a prefix and the first
measure is table lookups over all candidates at once. Pure NumPy, no I/O, deterministic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

MILLI = 1000
MAX_GPUS = 8
CAPACITY_WEIGHT = 0.1
CPU_WEIGHT = 1.0
BEST_FIT_WEIGHT = 1e-6  # best fit only breaks ties between equally fragmenting choices
MAX_SPEC_CPU = 128_000  # best fit's normalisation (the published simulator's constants)
MAX_SPEC_GPU = 8_000
PRIOR_PODS = 1  # whole-node pods per node shape the demand always holds (`whole_node_prior`)
# Pods seen that weigh as much as one of those whole-node pods: with fewer (4), a lone pod
# pinned to one GPU model no longer kept unpinned work off that model's nodes (the example
# of tests/integration/test_model_constraints.py)
SEEN_PER_PRIOR = 8
PRIOR_CPU_CAP = MAX_SPEC_CPU * 64  # a node without a CPU figure: as the Placer caps its CPU

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class RequestType:
    """One pod's shape: CPU (milli), GPUs, milli per GPU (< 1000: a share of one GPU), and the
    access classes it may use (None: every class)."""

    cpu: int
    num_gpu: int
    milli: int
    access: frozenset[int] | None = None


@dataclass(frozen=True, slots=True)
class Reach:
    """GPU capacity by node shape (access class, allocatable CPU, GPUs): what each request
    type could use if every node were empty. A type reaches the nodes of the classes it may use
    whose CPU and GPUs could host one of its pods, so a rare shape that only a few nodes can
    take (an 8-GPU pod asking 120 CPUs) weighs as much as a type limited to those nodes by a
    selector would."""

    cls: IntArray
    cpu: IntArray
    gpus: IntArray
    capacity: FloatArray

    @staticmethod
    def of(cls: IntArray, cpu: IntArray, gpus: IntArray, capacity: FloatArray) -> Reach:
        """One entry per distinct shape of the nodes given (per node arrays)."""
        keys = np.stack([cls, cpu, gpus], axis=1).astype(np.int64)
        uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
        total = np.bincount(inverse.reshape(-1), weights=capacity, minlength=len(uniq))
        return Reach(uniq[:, 0], uniq[:, 1], uniq[:, 2], np.asarray(total, dtype=np.float64))

    def of_types(self, types: Sequence[RequestType], allowed: BoolArray) -> FloatArray:
        """The capacity each type reaches (`allowed`: types x classes)."""
        cpu = np.asarray([t.cpu for t in types], dtype=np.int64)[:, None]
        gpus = np.asarray([max(1, t.num_gpu) for t in types], dtype=np.int64)[:, None]
        hosts = allowed[:, self.cls] & (self.cpu[None, :] >= cpu) & (self.gpus[None, :] >= gpus)
        return np.asarray(hosts.astype(np.float64) @ self.capacity, dtype=np.float64)


def _order(t: RequestType) -> tuple[int, int, int, tuple[int, ...]]:
    access = (-1,) if t.access is None else tuple(sorted(t.access))
    return (-t.cpu, t.num_gpu, t.milli, access)


class FragmentModel:
    """The measures for one demand mix (pods per type) over `classes` access classes.

    Built in proportion to types x GPU shapes, not x milli values, so that it can be rebuilt
    whenever the mix changes: the tables hold, per class and per CPU prefix of the types, the
    weight of each GPU shape, and the per-shape stranded milli is looked up per GPU."""

    def __init__(
        self,
        mix: Mapping[RequestType, int],
        classes: int,
        capacity: Sequence[float] | Reach | None = None,
        width: int = MAX_GPUS,
    ) -> None:
        """`capacity`: GPU capacity per class, or by node shape (`Reach`). With it, a type's
        weight is its share of demand per unit of capacity it can use (relative to the whole
        cluster's): 20 % of the pods limited to a tenth of the GPUs press on those GPUs as hard
        as the rest do on all of them, so the fragments they would suffer, and the free room
        they alone could use, count that much more there."""
        if classes < 1:
            raise ValueError("at least one access class")
        self.classes = classes
        self.width = width  # GPUs per node row
        types = sorted((t for t in mix if t.num_gpu and mix[t] > 0), key=_order)  # most CPU first
        total = float(sum(mix[t] for t in types)) or 1.0
        share = np.asarray([mix[t] / total for t in types], dtype=np.float64)
        allowed = np.ones((len(types), classes), dtype=bool)
        for k, t in enumerate(types):
            if t.access is not None:
                allowed[k] = False
                allowed[k, [c for c in t.access if 0 <= c < classes]] = True
        if capacity is not None and len(types):
            if isinstance(capacity, Reach):
                whole, reach = float(capacity.capacity.sum()), capacity.of_types(types, allowed)
            else:
                cap = np.asarray(capacity, dtype=np.float64)
                whole, reach = float(cap.sum()), allowed @ cap
            # a type that fits nowhere changes no choice; leave its weight as it is
            share = share * np.where(reach > 0, whole / np.maximum(reach, 1e-12), 1.0)
        self.cpu_desc = np.asarray([t.cpu for t in types], dtype=np.int64)
        keys = sorted({(t.num_gpu, t.milli) for t in types})
        shape_pos = {k: i for i, k in enumerate(keys)}
        shape_of = np.asarray([shape_pos[(t.num_gpu, t.milli)] for t in types], dtype=np.intp)
        n_types, n_shapes = len(types), len(keys)
        # weights[c, j, s]: weight of the types before j (in CPU order) of shape s allowed on c
        per_type = np.zeros((classes, n_types, n_shapes), dtype=np.float64)
        if n_types:
            per_type[:, np.arange(n_types), shape_of] = (allowed * share[:, None]).T
        self.weights = np.zeros((classes, n_types + 1, n_shapes), dtype=np.float64)
        np.cumsum(per_type, axis=1, out=self.weights[:, 1:, :])
        self.weight = self.weights.sum(axis=2)  # [c, j]
        # per shape: milli stranded on one GPU with f free, and "needs more free GPUs"
        f = np.arange(MILLI + 2, dtype=np.float64)
        f[MILLI + 1] = 0.0  # no GPU there
        self.stranded_gpu = np.zeros((n_shapes, MILLI + 2), dtype=np.float64)
        self.needs_more = np.zeros((n_shapes, width + 1), dtype=np.float64)
        for k, (n, m) in enumerate(keys):
            if m < MILLI:
                self.stranded_gpu[k] = f * (f < m)
            else:
                self.stranded_gpu[k] = f * ((f > 0) & (f < MILLI))
                self.needs_more[k] = np.arange(width + 1) < n
        # a type that may not use a class strands everything free there
        self.no_access = np.asarray(
            [float(share[~allowed[:, c]].sum()) for c in range(classes)], dtype=np.float64
        )
        # filled up: per shape its per-GPU slot table, per type its shape, CPU and value
        self.shape_of = shape_of
        self.shape_n = np.asarray([max(1, n) for n, _ in keys], dtype=np.int64)
        slots = np.zeros((n_shapes, MILLI + 2), dtype=np.int64)
        for k, (_, m) in enumerate(keys):
            if m < MILLI:
                slots[k, : MILLI + 1] = np.arange(MILLI + 1) // m
            else:
                slots[k, MILLI] = 1  # whole-GPU shapes count free GPUs; n of them make a slot
        self.slots = slots
        self.type_cpu = np.maximum(self.cpu_desc, 1)
        type_weight = CAPACITY_WEIGHT * share
        self.total_weight = float(type_weight.sum())
        gpu_milli = np.asarray([t.num_gpu * t.milli for t in types], dtype=np.float64)
        self.type_value = (type_weight * gpu_milli)[:, None] * allowed  # (types, classes)
        # GPU milli the demand asks per milli-CPU on each class: free GPU beyond what a node's
        # free CPU can feed at that rate is stranded for the mix as a whole
        cpu_milli = np.asarray([t.cpu for t in types], dtype=np.float64)
        per_class = allowed.T.astype(np.float64)  # (classes, types)
        self.milli_per_cpu = (per_class @ (share * gpu_milli)) / np.maximum(
            1.0, per_class @ (share * cpu_milli)
        )
        self.cpu_weight = CPU_WEIGHT * float(share.sum())
        # what one pod of a type feeds beyond its CPU's worth at the class's rate: a node whose
        # free GPUs a big type would take whole with the CPU it has is not starved for it
        self.feed_bonus = np.where(
            allowed, gpu_milli[:, None] - cpu_milli[:, None] * self.milli_per_cpu[None, :], 0.0
        )  # (types, classes)

    # ------------------------------------------------------------------ measures
    def frag(
        self, rows: IntArray, cpu_left: IntArray, cls: IntArray, free: IntArray | None = None
    ) -> FloatArray:
        """One pod ahead: stranded capacity of nodes (rows of per-GPU free milli, -1: no GPU)
        with `cpu_left` milli-CPU free, of access class `cls`; all three may carry extra
        leading dimensions (the rows one more at the end). `free`: the rows' free milli, when
        the caller has it."""
        j = np.searchsorted(-self.cpu_desc, -cpu_left, side="left")
        idx = np.where(rows >= 0, rows, MILLI + 1)
        full = (rows == MILLI).sum(axis=-1)
        if free is None:
            free = np.where(rows > 0, rows, 0).sum(axis=-1)
        # per shape: what a pod of that shape could not use here (shapes first)
        per_shape = self.stranded_gpu[:, idx].sum(axis=-1) + self.needs_more[:, full] * (
            MILLI * full
        )
        last = self.weights.shape[1] - 1
        # types whose CPU fits weigh their shape's stranded milli; the rest strand everything
        fitting = self.weights[cls, last, :] - self.weights[cls, j, :]
        # shapes to the last axis (a transposed view, as np.moveaxis makes at a greater cost)
        gpu = (per_shape.transpose(*range(1, per_shape.ndim), 0) * fitting).sum(axis=-1)
        stranded_all = self.weight[cls, j] + self.no_access[cls]
        return np.asarray(gpu + stranded_all * free, dtype=np.float64)

    def filled(
        self, shape_slots: IntArray, free: IntArray, cpu_left: IntArray, cls: IntArray
    ) -> FloatArray:
        """Filled up: stranded capacity from `shape_slots` (shapes, nodes[, options]) summed
        per-GPU slots, `free` GPU milli (nodes[, options]), `cpu_left` and `cls` (nodes)."""
        extra = (1,) * (shape_slots.ndim - 1)
        gpu_slots = shape_slots // self.shape_n.reshape((-1, *extra))
        cpu_slots = cpu_left[None, :] // self.type_cpu[:, None]  # (types, nodes)
        value = self.type_value[:, cls]  # (types, nodes)
        if shape_slots.ndim == 3:
            cpu_slots = cpu_slots[:, :, None]
            value = value[:, :, None]
        usable = np.minimum(gpu_slots[self.shape_of], cpu_slots)
        used = (value * usable).sum(axis=0)
        # free GPU the node's CPU cannot feed at the mix's rate, or by one pod of a type that
        # fits there with the rest of its CPU at that rate (options on the last axis of `free`)
        bonus = self.feed_bonus[:, cls]
        if shape_slots.ndim == 3:
            bonus = bonus[:, :, None]
        best = np.where(usable > 0, bonus, 0.0).max(axis=0, initial=0.0)
        fed = (cpu_left * self.milli_per_cpu[cls]).reshape(free.shape[:1] + (1,) * (free.ndim - 1))
        fed = fed + best
        starved = self.cpu_weight * np.maximum(0.0, free - fed)
        return np.asarray(self.total_weight * free - used + starved, dtype=np.float64)

    def slot_sums(self, rows: IntArray) -> tuple[IntArray, IntArray]:
        """Per-GPU slot tables of `rows` (shapes, nodes, GPUs) and their sums over the GPUs."""
        per_gpu = self.slots[:, np.where(rows >= 0, rows, MILLI + 1)]
        return per_gpu, per_gpu.sum(axis=-1)

    def stranded(self, rows: IntArray, cpu_left: IntArray, cls: IntArray) -> FloatArray:
        """Both measures together, per node."""
        _, slots = self.slot_sums(rows)
        free = np.where(rows > 0, rows, 0).sum(axis=-1)
        return self.frag(rows, cpu_left, cls) + self.filled(slots, free, cpu_left, cls)

    # ------------------------------------------------------------------ one request
    def score(
        self, rows: IntArray, cpu: IntArray, cls: IntArray, cpu_req: int, n: int, m: int
    ) -> tuple[FloatArray, npt.NDArray[np.intp] | None]:
        """Score of placing a request (CPU `cpu_req`, `n` GPUs of `m` milli) on each candidate
        node (higher is better), and for a share the GPU it should take on each. Candidates
        must fit the request; nodes in the same state are scored once."""
        _, inverse, score, choice = self.score_states(rows, cpu, cls, cpu_req, n, m)
        return score[inverse], (choice[inverse] if choice is not None else None)

    def score_states(
        self, rows: IntArray, cpu: IntArray, cls: IntArray, cpu_req: int, n: int, m: int
    ) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp], FloatArray, npt.NDArray[np.intp] | None]:
        """`score` per distinct node state: one node of each state (`first`), each node's state
        (`inverse`), and the score and GPU choice of each state. A caller that goes on to
        work per node (the engine's weights) does so per state too."""
        if len(rows) < 2:  # one node is its own state
            one = np.zeros(len(rows), dtype=np.intp)
            return one, one, *self._score(rows, cpu, cls, cpu_req, n, m)
        first, inverse = same_states(rows, cpu, cls)
        return first, inverse, *self._score(rows[first], cpu[first], cls[first], cpu_req, n, m)

    def score_one_each(
        self, rows: IntArray, cpu: IntArray, cls: IntArray, cpu_req: int, n: int, m: int
    ) -> tuple[FloatArray, npt.NDArray[np.intp] | None]:
        """`score_states`' scores and GPU choices for rows that are distinct states already
        (a caller that keeps its nodes grouped by state): one per row, as it gives them."""
        return self._score(rows, cpu, cls, cpu_req, n, m)

    def _score(
        self, rows: IntArray, cpu_before: IntArray, cls: IntArray, cpu_req: int, n: int, m: int
    ) -> tuple[FloatArray, npt.NDArray[np.intp] | None]:
        cpu_after = cpu_before - cpu_req
        per_gpu, slots = self.slot_sums(rows)
        free = np.where(rows > 0, rows, 0).sum(axis=1)
        before = self.frag(rows, cpu_before, cls, free) + self.filled(slots, free, cpu_before, cls)
        choice = None
        if n == 0:
            after = self.frag(rows, cpu_after, cls, free) + self.filled(slots, free, cpu_after, cls)
        elif m < MILLI:
            # every GPU the share fits on is an option; keep each node's best
            width = rows.shape[1]
            options = np.repeat(rows[:, None, :], width, axis=1)
            gpus = np.arange(width)
            options[:, gpus, gpus] -= m
            fits = rows >= m
            cpu_opt = np.repeat(cpu_after[:, None], width, axis=1)
            cls_opt = np.repeat(cls[:, None], width, axis=1)
            taken = np.where(fits, rows - m, MILLI + 1)
            slots_opt = slots[:, :, None] - per_gpu + self.slots[:, taken]
            free_opt = np.repeat((free - m)[:, None], width, axis=1)
            opt = self.frag(options, cpu_opt, cls_opt) + self.filled(
                slots_opt, free_opt, cpu_after, cls
            )
            # among equally good GPUs, the fullest (best fit inside the node)
            opt = np.where(fits, opt + 1e-9 * rows, np.inf)
            choice = np.argmin(opt, axis=1)
            after = opt.min(axis=1)
        else:
            after_rows = take_whole(rows, n)
            _, after_slots = self.slot_sums(after_rows)
            after_free = free - n * m  # n whole GPUs taken: exact in integers
            after = self.frag(after_rows, cpu_after, cls, after_free) + self.filled(
                after_slots, after_free, cpu_after, cls
            )
        fit = best_fit(rows, cpu_before, cpu_req, n * m, free)
        return np.asarray(before - after + BEST_FIT_WEIGHT * fit, dtype=np.float64), choice


def take_whole(rows: IntArray, n: int) -> IntArray:
    """Rows after `n` whole free GPUs (the first ones) are taken."""
    out = rows.copy()
    full = rows == MILLI
    out[full & (np.cumsum(full, axis=-1) <= n)] = 0
    return out


def best_fit(
    rows: IntArray, cpu: IntArray, cpu_req: int, gpu_req: int, free: IntArray | None = None
) -> FloatArray:
    """Least weighted leftover of CPU and GPU after placing (higher = less left); `free`: the
    rows' free milli, when the caller has it."""
    gpu_left = np.where(rows > 0, rows, 0).sum(axis=-1) if free is None else free
    left = 0.5 * (cpu - cpu_req) / MAX_SPEC_CPU + 0.5 * (gpu_left - gpu_req) / MAX_SPEC_GPU
    return np.asarray(-left, dtype=np.float64)


def same_states(
    rows: IntArray, cpu: IntArray, cls: IntArray
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """Groups equal (free per GPU, CPU, class) states: one index per group, and each row's
    group. Exact integer keys, five GPUs in 11 bits each per key, sorted together."""
    shifted = rows + 1  # -1..1000 -> 0..1001, 11 bits
    keys = [np.asarray(cls, dtype=np.int64), np.asarray(cpu, dtype=np.int64)]
    for start in range(0, rows.shape[1], 5):
        key = np.zeros(len(rows), dtype=np.int64)
        for g in range(start, min(start + 5, rows.shape[1])):
            key = (key << 11) | shifted[:, g]
        keys.append(key)
    order = np.lexsort(tuple(reversed(keys)))
    new = np.ones(len(order), dtype=bool)
    if len(order):
        new[1:] = False
        for key in keys:
            k = key[order]
            new[1:] |= k[1:] != k[:-1]
    group = np.cumsum(new) - 1
    inverse = np.empty(len(order), dtype=np.intp)
    inverse[order] = group
    return order[new], inverse


def whole_node_prior(reach: Reach) -> dict[RequestType, int]:
    """`PRIOR_PODS` pods per node shape (CPU, GPUs) that would take such a node whole, allowed
    wherever they fit: the work the cluster's nodes were bought for, weighed before any of it
    is seen. Without it the model has no reason to keep a node whole until a big pod arrives,
    and the first small pods break the only nodes a rare big shape fits (an 8-GPU pod asking
    120 CPUs fits 39 of a trace's 1,213 nodes). Each weighs as an eighth of a pod seen
    (`SEEN_PER_PRIOR`), so once real demand is seen they weigh little. The shape leaves out
    the class, so that the same nodes give the same prior however they are grouped into
    classes (by model, or by pool and taints)."""
    shapes = {
        (min(int(cpu), PRIOR_CPU_CAP), int(gpus))
        for cpu, gpus in zip(reach.cpu.tolist(), reach.gpus.tolist(), strict=True)
        if gpus > 0
    }
    return {RequestType(cpu, gpus, MILLI): PRIOR_PODS for cpu, gpus in sorted(shapes)}


def model_of(
    mix: Mapping[RequestType, int],
    classes: int,
    cached: tuple[tuple[tuple[RequestType, int], ...], FragmentModel] | None,
    capacity: Sequence[float] | Reach | None = None,
    width: int = MAX_GPUS,
) -> tuple[tuple[tuple[RequestType, int], ...], FragmentModel]:
    """The model for `mix`, reusing `cached` when it was built for the same mix (a pure
    function of the mix: the same demand always gives the same model). With capacity by node
    shape (`Reach`), the demand also holds each shape's whole-node pods (`whole_node_prior`),
    each weighing as `SEEN_PER_PRIOR` pods of the mix do."""
    key = tuple(sorted(((t, n) for t, n in mix.items() if n > 0 and t.num_gpu), key=_key))
    if cached is not None and cached[0] == key:
        return cached
    demand = {t: n * SEEN_PER_PRIOR for t, n in key}
    if isinstance(capacity, Reach):
        for t, n in whole_node_prior(capacity).items():
            demand[t] = demand.get(t, 0) + n
    return key, FragmentModel(demand, classes, capacity, width)


def _key(item: tuple[RequestType, int]) -> tuple[tuple[int, int, int, tuple[int, ...]], int]:
    return _order(item[0]), item[1]


def access_classes(keys: Sequence[object]) -> tuple[list[int], dict[object, int]]:
    """A class id per node from any hashable description of what it admits (first seen, first
    numbered), and the ids by description."""
    ids: dict[object, int] = {}
    out = [ids.setdefault(k, len(ids)) for k in keys]
    return out, ids
