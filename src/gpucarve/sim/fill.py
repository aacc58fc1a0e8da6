"""The published fill experiment on the Alibaba GPU-sharing trace (Weng et al., ATC 2023).

A cluster (`openb_node_list_gpu_node.csv`) receives the trace's pods, shuffled by a seed and
inflated to 1.3 x its GPU capacity, one at a time; no pod leaves and a pod that does not fit is
never retried. The figure is the GPU allocation ratio when the arrived GPU request reaches 90,
95, 100 and 130 % of capacity.

A pod fits a node when CPU, memory and GPU fit and the node's model is allowed: a share pod
(`num_gpu` 1, `gpu_milli` < 1000) takes `gpu_milli` of one GPU (the fullest one it fits, as the
published simulator's default does), a k-GPU pod takes k free GPUs. Node choice is the policy's;
ties go to a seeded random pick among the best, as kube-scheduler's does.

Vectorised with NumPy: one placement scores every node at once.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from gpucarve.config.csv_rows import CsvRow, read_csv
from gpucarve.core.problems import InvalidInput, Problem
from gpucarve.core.quantity import whole_number

MILLI = 1000
MAX_GPUS = 8
MAX_SPEC_CPU = 128_000  # the published simulator's normalisation constants
MAX_SPEC_GPU = 8_000
MARKS = (90, 95, 100, 130)
MAX_CELL = 10**9  # far above the trace's largest node (96 CPUs, 768 GiB); int64 stays exact

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Nodes:
    names: tuple[str, ...]
    cpu: IntArray
    mem: IntArray
    gpus: IntArray
    model: tuple[str, ...]

    @property
    def gpu_capacity(self) -> int:
        return int(self.gpus.sum()) * MILLI


@dataclass(frozen=True)
class Pods:
    names: tuple[str, ...]
    cpu: IntArray
    mem: IntArray
    num_gpu: IntArray
    gpu_milli: IntArray
    spec: tuple[frozenset[str], ...]  # allowed models; empty: any

    def request(self) -> IntArray:
        return np.asarray(self.num_gpu * self.gpu_milli, dtype=np.int64)


def _bad(source: str, line: int, message: str) -> InvalidInput:
    return InvalidInput(
        source, [Problem((f"line {line}",), "bad-row", message, "fix the row", line=line)]
    )


def _read(path: Path, required: Sequence[str]) -> list[CsvRow]:
    _, rows = read_csv(str(path), "the trace's CSV", required)
    for row in rows:
        if row.problem is not None:
            raise InvalidInput(str(path), [row.problem])
    return rows


def _ints(rows: list[CsvRow], key: str, source: str) -> IntArray:
    out = []
    for r in rows:
        try:
            out.append(whole_number(r.get(key), key, MAX_CELL))
        except ValueError as exc:
            raise _bad(source, r.line, str(exc)) from None
    return np.asarray(out, dtype=np.int64)


def _none_left(source: str, message: str, fix: str) -> InvalidInput:
    return InvalidInput(source, [Problem((), "nothing-to-fill", message, fix)])


def load_nodes(path: str | Path) -> Nodes:
    p = Path(path)
    rows = _read(p, ("sn", "cpu_milli", "memory_mib", "gpu", "model"))
    gpus = _ints(rows, "gpu", str(p))
    if (gpus > MAX_GPUS).any():
        line = rows[int(np.argmax(gpus > MAX_GPUS))].line
        raise _bad(str(p), line, f"more than {MAX_GPUS} GPUs on a node")
    if int(gpus.sum()) == 0:
        raise _none_left(str(p), "no node with a GPU", "pass the trace's GPU node list")
    return Nodes(
        tuple(r.get("sn") for r in rows),
        _ints(rows, "cpu_milli", str(p)),
        _ints(rows, "memory_mib", str(p)),
        gpus,
        tuple(r.get("model") for r in rows),
    )


def load_pods(path: str | Path) -> Pods:
    p = Path(path)
    rows = _read(p, ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"))
    num_gpu = _ints(rows, "num_gpu", str(p))
    milli = _ints(rows, "gpu_milli", str(p))
    for r, n, m in zip(rows, num_gpu, milli, strict=True):
        if m > MILLI or (n > 1 and m != MILLI) or (n > 0 and m == 0):
            raise _bad(str(p), r.line, f"num_gpu {n} with gpu_milli {m} is not a valid request")
    if not int((num_gpu * milli).sum()):
        raise _none_left(
            str(p), "no pod asks for a GPU", "pass a pod list with GPU pods (num_gpu ≥ 1)"
        )
    spec = tuple(frozenset(x for x in r.get("gpu_spec").split("|") if x) for r in rows)
    order = sorted(range(len(rows)), key=lambda i: rows[i].get("name"))
    pick = np.asarray(order, dtype=np.int64)
    return Pods(
        tuple(rows[i].get("name") for i in order),
        _ints(rows, "cpu_milli", str(p))[pick],
        _ints(rows, "memory_mib", str(p))[pick],
        num_gpu[pick],
        milli[pick],
        tuple(spec[i] for i in order),
    )


def arrival_order(pods: Pods, capacity: int, seed: int, inflation: float = 1.3) -> list[int]:
    """Shuffle with the seed, then append pods drawn with replacement until the next draw would
    push the total GPU request over `inflation` x capacity (compared, like the published code,
    using the drawn pod's per-GPU milli)."""
    if not capacity or not int(pods.request().sum()):
        raise ValueError("the fill needs GPUs and pods that ask for them")  # loaders refuse both
    rng = random.Random(seed)
    order = list(range(len(pods.names)))
    rng.shuffle(order)
    total = int(pods.request().sum())
    limit = inflation * capacity
    while True:
        i = rng.randrange(len(pods.names))
        if total + int(pods.gpu_milli[i]) > limit:
            break
        order.append(i)
        total += int(pods.num_gpu[i] * pods.gpu_milli[i])
    return order


class FillCluster:
    def __init__(self, nodes: Nodes) -> None:
        n = len(nodes.names)
        self.nodes = nodes
        self.cpu = nodes.cpu.copy()
        self.mem = nodes.mem.copy()
        left = np.full((n, MAX_GPUS), -1, dtype=np.int64)
        for i, g in enumerate(nodes.gpus):
            left[i, :g] = MILLI
        self.left = left
        models = sorted(set(nodes.model))
        self.model_ids = {m: k for k, m in enumerate(models)}
        self.model = np.asarray([self.model_ids[m] for m in nodes.model], dtype=np.int64)
        self.shares: dict[int, IntArray] = {}  # gpu_milli -> pods of that share per node

    def same_share(self, milli: int) -> IntArray:
        return self.shares.get(milli, np.zeros(len(self.cpu), dtype=np.int64))

    def feasible(self, pods: Pods, i: int) -> npt.NDArray[np.bool_]:
        ok: npt.NDArray[np.bool_] = (self.cpu >= pods.cpu[i]) & (self.mem >= pods.mem[i])
        spec = pods.spec[i]
        if spec:
            allowed = [self.model_ids[m] for m in spec if m in self.model_ids]
            ok &= np.isin(self.model, allowed)
        n, m = int(pods.num_gpu[i]), int(pods.gpu_milli[i])
        if n == 0:
            return ok
        if m < MILLI:
            return np.asarray(ok & (self.left >= m).any(axis=1), dtype=np.bool_)
        return np.asarray(ok & ((self.left == MILLI).sum(axis=1) >= n), dtype=np.bool_)

    def place(
        self,
        pods: Pods,
        i: int,
        node: int,
        gpu_rng: np.random.Generator | None = None,
        gpu: int | None = None,
    ) -> None:
        """`gpu_rng`: pick a share pod's GPU at random among those it fits, instead of the
        fullest one (the published random policy's GPU choice)."""
        self.cpu[node] -= pods.cpu[i]
        self.mem[node] -= pods.mem[i]
        n, m = int(pods.num_gpu[i]), int(pods.gpu_milli[i])
        if n == 0:
            return
        if m not in self.shares:
            self.shares[m] = np.zeros(len(self.cpu), dtype=np.int64)
        self.shares[m][node] += 1
        row = self.left[node]
        if m < MILLI and gpu is not None:
            row[gpu] -= m
        elif m < MILLI and gpu_rng is not None:
            fitting = np.flatnonzero(row >= m)
            row[int(fitting[int(gpu_rng.integers(len(fitting)))])] -= m
        elif m < MILLI:
            fits = np.where(row >= m, row, MILLI + 1)
            row[int(np.argmin(fits))] -= m  # the fullest GPU that fits
        else:
            free = np.flatnonzero(row == MILLI)[:n]
            row[free] = 0

    def gpu_left(self) -> IntArray:
        return np.asarray(np.where(self.left > 0, self.left, 0).sum(axis=1), dtype=np.int64)


Score = Callable[[FillCluster, Pods, int, npt.NDArray[np.intp]], npt.NDArray[np.float64]]


def best_fit(
    c: FillCluster, pods: Pods, i: int, cand: npt.NDArray[np.intp]
) -> npt.NDArray[np.float64]:
    """Least weighted leftover of CPU and GPU after placing (higher score = less left)."""
    cpu_after = (c.cpu[cand] - pods.cpu[i]) / MAX_SPEC_CPU
    gpu_after = (c.gpu_left()[cand] - pods.num_gpu[i] * pods.gpu_milli[i]) / MAX_SPEC_GPU
    return np.asarray(-(0.5 * cpu_after + 0.5 * gpu_after), dtype=np.float64)


def random_fit(
    c: FillCluster, pods: Pods, i: int, cand: npt.NDArray[np.intp]
) -> npt.NDArray[np.float64]:
    return np.zeros(len(cand), dtype=np.float64)


def _same_states(
    rows: IntArray, cpu: IntArray
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """Groups equal (free per GPU, CPU) states: one index per group, and each row's group.
    Two exact integer keys (GPU 0-4 in 11 bits each; GPU 5-7 and CPU) sorted together."""
    shifted = rows + 1  # -1..1000 -> 0..1001, 11 bits
    high = np.zeros(len(rows), dtype=np.int64)
    for g in range(5):
        high = (high << 11) | shifted[:, g]
    low = np.asarray(cpu, dtype=np.int64)
    for g in range(5, MAX_GPUS):
        low = (low << 11) | shifted[:, g]
    order = np.lexsort((low, high))
    hs, ls = high[order], low[order]
    new = np.ones(len(order), dtype=bool)
    new[1:] = (hs[1:] != hs[:-1]) | (ls[1:] != ls[:-1])
    group = np.cumsum(new) - 1
    inverse = np.empty(len(order), dtype=np.intp)
    inverse[order] = group
    return order[new], inverse


class Fragmentation:
    """gpucarve's placement for this experiment: the choice that strands the least GPU capacity
    for the mix of requests the trace shows.

    Two measures of stranded capacity, both weighted by how often each request type appears:

    - one pod ahead (fragmentation gradient descent, Weng et al.): for a type `t` a node's free
      GPU capacity is stranded where `t` cannot use it: GPUs with less free than a share
      request needs, partly used GPUs for whole-GPU requests, everything when the node has
      fewer free GPUs than a k-GPU request needs or lacks the CPU `t` needs;
    - filled up (gpucarve's addition, weight `CAPACITY_WEIGHT`): the free capacity a node
      would still hold after taking as many pods of `t` as it can, counting per-GPU slots
      (two 470-milli shares per free GPU, not "it fits") and CPU slots (a node with 10 free
      CPUs runs one 8-CPU pod, however many GPUs it has free). FGD sees only the next pod, so
      it lets CPU run out under free GPUs one pod at a time; this term sees that coming.

    Types are sorted by CPU so that "the types this node's CPU cannot host" is a prefix and the
    first measure is table lookups; the second groups types by GPU shape so per-GPU slots are
    computed once per shape. Ties go to best fit.
    """

    CPU_BUCKET = 1  # milli-CPU: request types are grouped to this granularity
    CAPACITY_WEIGHT = 0.1

    def __init__(self, pods: Pods) -> None:
        self.gpu_choice: npt.NDArray[np.intp] | None = None  # per candidate, for share pods
        gpu = pods.num_gpu > 0
        total = max(1, int(gpu.sum()))
        cpu = -(-pods.cpu[gpu] // self.CPU_BUCKET) * self.CPU_BUCKET
        keys = np.stack([cpu, pods.num_gpu[gpu], pods.gpu_milli[gpu]], axis=1)
        types, counts = np.unique(keys, axis=0, return_counts=True)
        order = np.argsort(-types[:, 0], kind="stable")  # most CPU first
        types, counts = types[order], counts[order]
        self.cpu_desc = types[:, 0]
        f = np.arange(MILLI + 1, dtype=np.float64)
        t_count = len(types)
        # prefix tables over types 0..j-1: GPU cost per free value, need-more per free count
        cost = np.zeros((t_count + 1, MILLI + 2), dtype=np.float64)
        need = np.zeros((t_count + 1, MAX_GPUS + 1), dtype=np.float64)
        weight = np.zeros(t_count + 1, dtype=np.float64)
        for j, ((_, n, m), count) in enumerate(zip(types, counts, strict=True)):
            share = count / total
            row = np.zeros(MILLI + 2)
            if m < MILLI:
                row[: MILLI + 1] = share * f * (f < m)
                more = np.zeros(MAX_GPUS + 1)
            else:
                row[: MILLI + 1] = share * f * ((f > 0) & (f < MILLI))
                more = share * (np.arange(MAX_GPUS + 1) < n)
            cost[j + 1] = cost[j] + row
            need[j + 1] = need[j] + more
            weight[j + 1] = weight[j] + share
        self.cost, self.need, self.weight = cost, need, weight
        # filled-up measure: GPU shapes (n, m), their per-GPU slot tables, and per type the
        # shape, CPU and weight
        shapes, shape_of = np.unique(types[:, 1:], axis=0, return_inverse=True)
        self.shape_of = shape_of.reshape(-1)
        self.shape_n = shapes[:, 0]
        slots = np.zeros((len(shapes), MILLI + 2), dtype=np.int64)
        for k, (_, m) in enumerate(shapes):
            if m < MILLI:
                slots[k, : MILLI + 1] = np.arange(MILLI + 1) // m
            else:
                slots[k, MILLI] = 1  # whole-GPU shapes count free GPUs; n of them make a slot
        self.slots = slots
        self.type_cpu = np.maximum(types[:, 0], 1)
        type_weight = self.CAPACITY_WEIGHT * counts / total
        self.total_weight = float(type_weight.sum())
        self.type_value = type_weight * (types[:, 1] * types[:, 2])

    def frag(self, rows: IntArray, cpu_left: IntArray) -> npt.NDArray[np.float64]:
        """One pod ahead: stranded capacity of nodes (rows of per-GPU free milli, -1: no GPU)
        that have `cpu_left` milli-CPU free; both may carry extra leading dimensions."""
        # types sorted by CPU descending: those needing more than is left form a prefix
        j = np.searchsorted(-self.cpu_desc, -cpu_left, side="left")
        idx = np.where(rows >= 0, rows, MILLI + 1)
        full = (rows == MILLI).sum(axis=-1)
        free = np.where(rows > 0, rows, 0).sum(axis=-1)
        last = len(self.weight) - 1
        gpu_all = self.cost[last][idx].sum(axis=-1) + self.need[last][full] * MILLI * full
        lack = self.cost[j[..., None], idx].sum(axis=-1) + self.need[j, full] * MILLI * full
        # types the CPU cannot host strand everything free; the rest strand what they cannot use
        return np.asarray(gpu_all - lack + self.weight[j] * free, dtype=np.float64)

    def filled(
        self, shape_slots: IntArray, free: IntArray, cpu_left: IntArray
    ) -> npt.NDArray[np.float64]:
        """Filled up: stranded capacity from `shape_slots` (shapes, nodes[, options]) summed
        per-GPU slots, `free` GPU milli (nodes[, options]) and `cpu_left` (nodes)."""
        extra = (1,) * (shape_slots.ndim - 1)
        gpu_slots = shape_slots // self.shape_n.reshape((-1, *extra))
        cpu_slots = cpu_left[None, :] // self.type_cpu[:, None]  # (types, nodes)
        if shape_slots.ndim == 3:
            cpu_slots = cpu_slots[:, :, None]
        usable = np.minimum(gpu_slots[self.shape_of], cpu_slots)
        used = np.tensordot(self.type_value, usable, axes=(0, 0))
        return np.asarray(self.total_weight * free - used, dtype=np.float64)

    def __call__(
        self, c: FillCluster, pods: Pods, i: int, cand: npt.NDArray[np.intp]
    ) -> npt.NDArray[np.float64]:
        # Nodes in the same state (free per GPU, CPU) score the same: score each state once.
        first, inverse = _same_states(c.left[cand], c.cpu[cand])
        score = self._score(c, pods, i, cand[first])
        if self.gpu_choice is not None:
            self.gpu_choice = self.gpu_choice[inverse]
        return np.asarray(score[inverse], dtype=np.float64)

    def _score(
        self, c: FillCluster, pods: Pods, i: int, cand: npt.NDArray[np.intp]
    ) -> npt.NDArray[np.float64]:
        rows = c.left[cand]
        cpu_before = c.cpu[cand]
        cpu_after = cpu_before - pods.cpu[i]
        idx = np.where(rows >= 0, rows, MILLI + 1)
        per_gpu = self.slots[:, idx]  # (shapes, candidates, GPUs)
        slots = per_gpu.sum(axis=2)
        free = np.where(rows > 0, rows, 0).sum(axis=1)
        before = self.frag(rows, cpu_before) + self.filled(slots, free, cpu_before)
        n, m = int(pods.num_gpu[i]), int(pods.gpu_milli[i])
        self.gpu_choice = None
        if n == 0:
            after = self.frag(rows, cpu_after) + self.filled(slots, free, cpu_after)
        elif m < MILLI:
            # every GPU the share pod fits on is an option; keep each node's best
            options = np.repeat(rows[:, None, :], MAX_GPUS, axis=1)
            gpus = np.arange(MAX_GPUS)
            options[:, gpus, gpus] -= m
            fits = rows >= m
            cpu_opt = np.repeat(cpu_after[:, None], MAX_GPUS, axis=1)
            taken = np.where(fits, rows - m, MILLI + 1)
            slots_opt = slots[:, :, None] - per_gpu + self.slots[:, taken]
            free_opt = np.repeat((free - m)[:, None], MAX_GPUS, axis=1)
            opt = self.frag(options, cpu_opt) + self.filled(slots_opt, free_opt, cpu_after)
            # among equally good GPUs, the fullest (best fit inside the node)
            opt = np.where(fits, opt + 1e-9 * rows, np.inf)
            self.gpu_choice = np.argmin(opt, axis=1)
            after = opt.min(axis=1)
        else:
            after_rows = rows.copy()
            full = rows == MILLI
            take = np.cumsum(full, axis=1) <= n
            after_rows[full & take] = 0
            after_idx = np.where(after_rows >= 0, after_rows, MILLI + 1)
            after_slots = self.slots[:, after_idx].sum(axis=2)
            after = self.frag(after_rows, cpu_after) + self.filled(
                after_slots, free - n * m, cpu_after
            )
        delta = after - before
        # lower fragmentation first, then best fit (scaled to stay a tie-breaker)
        return np.asarray(-delta + 1e-6 * best_fit(c, pods, i, cand), dtype=np.float64)


def dot_product(
    c: FillCluster, pods: Pods, i: int, cand: npt.NDArray[np.intp]
) -> npt.NDArray[np.float64]:
    """The node whose free (CPU, GPU) vector best aligns with the request (Tetris)."""
    req = np.asarray(
        [pods.cpu[i] / MAX_SPEC_CPU, pods.num_gpu[i] * pods.gpu_milli[i] / MAX_SPEC_GPU]
    )
    free = np.stack([c.cpu[cand] / MAX_SPEC_CPU, c.gpu_left()[cand] / MAX_SPEC_GPU], axis=1)
    return np.asarray(free @ req, dtype=np.float64)


def gpu_packing(
    c: FillCluster, pods: Pods, i: int, cand: npt.NDArray[np.intp]
) -> npt.NDArray[np.float64]:
    """Partly used GPUs first, then partly used nodes, then idle nodes."""
    rows = c.left[cand]
    m = int(pods.gpu_milli[i])
    partly_gpu = ((rows > 0) & (rows < MILLI) & (rows >= m)).any(axis=1)
    partly_node = ((rows >= 0) & (rows < MILLI)).any(axis=1)
    share = pods.num_gpu[i] == 1 and m < MILLI
    return np.asarray(2.0 * (partly_gpu & share) + 1.0 * partly_node, dtype=np.float64)


def gpu_clustering(
    c: FillCluster, pods: Pods, i: int, cand: npt.NDArray[np.intp]
) -> npt.NDArray[np.float64]:
    """Nodes already hosting pods of the same GPU share first."""
    return np.asarray(c.same_share(int(pods.gpu_milli[i]))[cand], dtype=np.float64)


POLICIES: dict[str, Score] = {
    "random": random_fit,
    "dot-product": dot_product,
    "gpu-clustering": gpu_clustering,
    "gpu-packing": gpu_packing,
    "best-fit": best_fit,
}


@dataclass(frozen=True)
class FillRun:
    policy: str
    seed: int
    ratio_at: dict[int, float]  # arrived % -> allocation ratio %


def run_fill(nodes: Nodes, pods: Pods, policy: str, seed: int) -> FillRun:
    score = Fragmentation(pods) if policy == "gpucarve" else POLICIES[policy]
    capacity = nodes.gpu_capacity
    order = arrival_order(pods, capacity, seed)
    tie_rng = np.random.default_rng(seed)
    cluster = FillCluster(nodes)
    requests = pods.request()
    arrived = 0
    allocated = 0
    marks = sorted(MARKS)
    ratio_at: dict[int, float] = {}
    for i in order:
        req = int(requests[i])
        while marks and arrived + req > marks[0] / 100 * capacity:
            ratio_at[marks.pop(0)] = 100 * allocated / capacity
        arrived += req
        cand = np.flatnonzero(cluster.feasible(pods, i))
        if len(cand) == 0:
            continue
        s = score(cluster, pods, i, cand)
        best = np.flatnonzero(s >= s.max() - 1e-12)
        pick = int(best[int(tie_rng.integers(len(best)))])
        node = int(cand[pick])
        choice = getattr(score, "gpu_choice", None)
        gpu = int(choice[pick]) if choice is not None else None
        cluster.place(pods, i, node, tie_rng if policy == "random" else None, gpu)
        allocated += req
    for m in marks:
        ratio_at[m] = 100 * allocated / capacity
    return FillRun(policy, seed, ratio_at)
