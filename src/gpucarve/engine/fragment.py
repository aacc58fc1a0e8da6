"""Fragmentation-aware placement: the choice that strands the least GPU capacity for the mix
of requests the cluster is seeing, counting only what each request may use where it may go.

A node is described by its free milli-GPU per GPU (a row of `MAX_GPUS`, -1 where it has no
GPU), its free CPU and its *access class*: nodes of one class admit the same request types
(GPU model, selectors and affinity, taints). A request type is (CPU, GPUs, milli per GPU,
classes it may use), weighted by its share of recent demand (`Demand`: a window of the last
requests, so the weights follow the queue as it changes).

Two measures of stranded capacity, both weighted by demand:

- one pod ahead (fragmentation gradient descent, Weng et al., ATC 2023): for a type `t` a
  node's free GPU capacity is stranded where `t` cannot use it: GPUs with less free than a
  share request needs, partly used GPUs for whole-GPU requests, everything when the node has
  too few free GPUs, lacks the CPU `t` needs, or is of a class `t` may not use;
- filled up (weight `CAPACITY_WEIGHT`): the free capacity a node still holds after taking as
  many pods of `t` as it can, counting per-GPU slots (two 470-milli shares per free GPU) and
  CPU slots (10 free CPUs run one 8-CPU pod, however many GPUs are free). FGD looks one pod
  ahead, so it lets CPU run out under free GPUs one pod at a time; this term sees it coming.

A type allowed on no node adds the same amount to every node and so changes no choice; a node
only constrained types may use counts as fragmented for everyone else, so unconstrained work is
steered away from capacity that only some requests can use.

Types are sorted by CPU so that "the types this node's CPU cannot host" is a prefix and the first
measure is table lookups over all candidates at once. Pure NumPy, no I/O, deterministic.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

MILLI = 1000
MAX_GPUS = 8
CAPACITY_WEIGHT = 0.1
BEST_FIT_WEIGHT = 1e-6  # best fit only breaks ties between equally fragmenting choices
MAX_SPEC_CPU = 128_000  # best fit's normalisation (the published simulator's constants)
MAX_SPEC_GPU = 8_000

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


def _order(t: RequestType) -> tuple[int, int, int, tuple[int, ...]]:
    access = (-1,) if t.access is None else tuple(sorted(t.access))
    return (-t.cpu, t.num_gpu, t.milli, access)


class Demand:
    """Request types weighted by their share of the last `window` requests."""

    def __init__(self, window: int) -> None:
        if window < 1:
            raise ValueError("the demand window holds at least one request")
        self.window = window
        self._recent: deque[RequestType] = deque()
        self.counts: Counter[RequestType] = Counter()
        self.version = 0  # bumped on every change

    def add(self, t: RequestType) -> None:
        if t.num_gpu == 0:
            return  # CPU-only work is felt through the CPU it leaves, not as a type
        self._recent.append(t)
        self.counts[t] += 1
        if len(self._recent) > self.window:
            old = self._recent.popleft()
            self.counts[old] -= 1
            if not self.counts[old]:
                del self.counts[old]
        self.version += 1

    def extend(self, types: Iterable[RequestType]) -> None:
        for t in types:
            self.add(t)

    def __len__(self) -> int:
        return len(self._recent)


class FragmentModel:
    """Lookup tables for one demand mix over `classes` access classes."""

    def __init__(
        self, mix: Counter[RequestType], classes: int, capacity: Sequence[float] | None = None
    ) -> None:
        """`capacity`: GPU capacity per class. With it, a type's weight is its share of demand
        per unit of capacity it may use (relative to the whole cluster's): 20 % of the pods
        limited to a tenth of the GPUs press on those GPUs as hard as the rest do on all of
        them, so the fragments they would suffer, and the free room they alone could use,
        count that much more there."""
        if classes < 1:
            raise ValueError("at least one access class")
        self.classes = classes
        types = sorted(mix, key=_order)  # most CPU first
        total = float(sum(mix[t] for t in types)) or 1.0
        share = np.asarray([mix[t] / total for t in types], dtype=np.float64)
        allowed = np.ones((len(types), classes), dtype=bool)
        for k, t in enumerate(types):
            if t.access is not None:
                allowed[k] = False
                allowed[k, [c for c in t.access if 0 <= c < classes]] = True
        if capacity is not None:
            cap = np.asarray(capacity, dtype=np.float64)
            reach = allowed @ cap
            # a type allowed nowhere changes no choice; leave its weight as it is
            share = share * np.where(reach > 0, cap.sum() / np.maximum(reach, 1e-12), 1.0)
        self.cpu_desc = np.asarray([t.cpu for t in types], dtype=np.int64)
        n_types = len(types)
        f = np.arange(MILLI + 1, dtype=np.float64)
        # prefix tables over types 0..j-1, per class: GPU cost per free value, need-more per
        # free count, weight
        cost = np.zeros((classes, n_types + 1, MILLI + 2), dtype=np.float64)
        need = np.zeros((classes, n_types + 1, MAX_GPUS + 1), dtype=np.float64)
        weight = np.zeros((classes, n_types + 1), dtype=np.float64)
        for j, t in enumerate(types):
            row = np.zeros(MILLI + 2)
            more = np.zeros(MAX_GPUS + 1)
            if t.milli < MILLI:
                row[: MILLI + 1] = share[j] * f * (f < t.milli)
            else:
                row[: MILLI + 1] = share[j] * f * ((f > 0) & (f < MILLI))
                more = share[j] * (np.arange(MAX_GPUS + 1) < t.num_gpu)
            mask = allowed[j][:, None]
            cost[:, j + 1] = cost[:, j] + mask * row
            need[:, j + 1] = need[:, j] + mask * more
            weight[:, j + 1] = weight[:, j] + allowed[j] * share[j]
        self.cost, self.need, self.weight = cost, need, weight
        # a type that may not use a class strands everything free there
        self.no_access = np.asarray(
            [float(share[~allowed[:, c]].sum()) for c in range(classes)], dtype=np.float64
        )
        # filled up: GPU shapes (n, m), their per-GPU slot tables, per type its shape and CPU
        keys = sorted({(t.num_gpu, t.milli) for t in types})
        shape_pos = {k: i for i, k in enumerate(keys)}
        self.shape_of = np.asarray([shape_pos[(t.num_gpu, t.milli)] for t in types], dtype=np.intp)
        self.shape_n = np.asarray([max(1, n) for n, _ in keys], dtype=np.int64)
        slots = np.zeros((len(keys), MILLI + 2), dtype=np.int64)
        for k, (_, m) in enumerate(keys):
            if m < MILLI:
                slots[k, : MILLI + 1] = np.arange(MILLI + 1) // m
            else:
                slots[k, MILLI] = 1  # whole-GPU shapes count free GPUs; n of them make a slot
        self.slots = slots
        self.type_cpu = np.maximum(self.cpu_desc, 1)
        type_weight = CAPACITY_WEIGHT * share
        self.total_weight = float(type_weight.sum())
        value = type_weight * np.asarray([t.num_gpu * t.milli for t in types], dtype=np.float64)
        self.type_value = value[:, None] * allowed  # (types, classes)

    # ------------------------------------------------------------------ measures
    def frag(self, rows: IntArray, cpu_left: IntArray, cls: IntArray) -> FloatArray:
        """One pod ahead: stranded capacity of nodes (rows of per-GPU free milli, -1: no GPU)
        with `cpu_left` milli-CPU free, of access class `cls`; all three may carry extra
        leading dimensions (the rows one more at the end)."""
        j = np.searchsorted(-self.cpu_desc, -cpu_left, side="left")
        idx = np.where(rows >= 0, rows, MILLI + 1)
        full = (rows == MILLI).sum(axis=-1)
        free = np.where(rows > 0, rows, 0).sum(axis=-1)
        last = self.cost.shape[1] - 1
        c = cls[..., None]
        gpu_all = self.cost[c, last, idx].sum(axis=-1) + self.need[cls, last, full] * MILLI * full
        lack = self.cost[c, j[..., None], idx].sum(axis=-1) + self.need[cls, j, full] * MILLI * full
        stranded_all = self.weight[cls, j] + self.no_access[cls]
        return np.asarray(gpu_all - lack + stranded_all * free, dtype=np.float64)

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
        return np.asarray(self.total_weight * free - used, dtype=np.float64)

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
        first, inverse = same_states(rows, cpu, cls)
        score, choice = self._score(rows[first], cpu[first], cls[first], cpu_req, n, m)
        return score[inverse], (choice[inverse] if choice is not None else None)

    def _score(
        self, rows: IntArray, cpu_before: IntArray, cls: IntArray, cpu_req: int, n: int, m: int
    ) -> tuple[FloatArray, npt.NDArray[np.intp] | None]:
        cpu_after = cpu_before - cpu_req
        per_gpu, slots = self.slot_sums(rows)
        free = np.where(rows > 0, rows, 0).sum(axis=1)
        before = self.frag(rows, cpu_before, cls) + self.filled(slots, free, cpu_before, cls)
        choice = None
        if n == 0:
            after = self.frag(rows, cpu_after, cls) + self.filled(slots, free, cpu_after, cls)
        elif m < MILLI:
            # every GPU the share fits on is an option; keep each node's best
            options = np.repeat(rows[:, None, :], MAX_GPUS, axis=1)
            gpus = np.arange(MAX_GPUS)
            options[:, gpus, gpus] -= m
            fits = rows >= m
            cpu_opt = np.repeat(cpu_after[:, None], MAX_GPUS, axis=1)
            cls_opt = np.repeat(cls[:, None], MAX_GPUS, axis=1)
            taken = np.where(fits, rows - m, MILLI + 1)
            slots_opt = slots[:, :, None] - per_gpu + self.slots[:, taken]
            free_opt = np.repeat((free - m)[:, None], MAX_GPUS, axis=1)
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
            after = self.frag(after_rows, cpu_after, cls) + self.filled(
                after_slots, free - n * m, cpu_after, cls
            )
        fit = best_fit(rows, cpu_before, cpu_req, n * m)
        return np.asarray(before - after + BEST_FIT_WEIGHT * fit, dtype=np.float64), choice


def take_whole(rows: IntArray, n: int) -> IntArray:
    """Rows after `n` whole free GPUs (the first ones) are taken."""
    out = rows.copy()
    full = rows == MILLI
    out[full & (np.cumsum(full, axis=-1) <= n)] = 0
    return out


def best_fit(rows: IntArray, cpu: IntArray, cpu_req: int, gpu_req: int) -> FloatArray:
    """Least weighted leftover of CPU and GPU after placing (higher = less left)."""
    gpu_left = np.where(rows > 0, rows, 0).sum(axis=-1)
    left = 0.5 * (cpu - cpu_req) / MAX_SPEC_CPU + 0.5 * (gpu_left - gpu_req) / MAX_SPEC_GPU
    return np.asarray(-left, dtype=np.float64)


def same_states(
    rows: IntArray, cpu: IntArray, cls: IntArray
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """Groups equal (free per GPU, CPU, class) states: one index per group, and each row's
    group. Exact integer keys (GPU 0-4 in 11 bits each; GPU 5-7 and CPU) sorted together."""
    shifted = rows + 1  # -1..1000 -> 0..1001, 11 bits
    high = np.zeros(len(rows), dtype=np.int64)
    for g in range(5):
        high = (high << 11) | shifted[:, g]
    low = np.asarray(cpu, dtype=np.int64)
    for g in range(5, MAX_GPUS):
        low = (low << 11) | shifted[:, g]
    order = np.lexsort((low, high, cls))
    hs, ls, cs = high[order], low[order], cls[order]
    new = np.ones(len(order), dtype=bool)
    new[1:] = (hs[1:] != hs[:-1]) | (ls[1:] != ls[:-1]) | (cs[1:] != cs[:-1])
    group = np.cumsum(new) - 1
    inverse = np.empty(len(order), dtype=np.intp)
    inverse[order] = group
    return order[new], inverse


def model_of(
    demand: Demand,
    classes: int,
    cached: tuple[int, FragmentModel] | None,
    every: int,
    capacity: Sequence[float] | None = None,
) -> tuple[int, FragmentModel]:
    """The model for the demand's current mix. It is rebuilt once `every` requests have come
    since the last build, or sooner while the window is still filling (a tenth of what it
    held then): the first requests must not stand for the mix for long."""
    if cached is not None:
        since = demand.version - cached[0]
        if since < min(every, len(demand) // 10 + 1):
            return cached
    return demand.version, FragmentModel(demand.counts, classes, capacity)


def access_classes(keys: Sequence[object]) -> tuple[list[int], dict[object, int]]:
    """A class id per node from any hashable description of what it admits (first seen, first
    numbered), and the ids by description."""
    ids: dict[object, int] = {}
    out = [ids.setdefault(k, len(ids)) for k in keys]
    return out, ids
