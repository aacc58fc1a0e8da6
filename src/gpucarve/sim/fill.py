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

import csv
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from gpucarve.core.problems import InvalidInput, Problem

MILLI = 1000
MAX_GPUS = 8
MAX_SPEC_CPU = 128_000  # the published simulator's normalisation constants
MAX_SPEC_GPU = 8_000
MARKS = (90, 95, 100, 130)

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
    return InvalidInput(source, [Problem((f"line {line}",), "bad-row", message, "fix the row", line=line)])


def _read(path: Path, required: Sequence[str]) -> list[dict[str, str]]:
    source = str(path)
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            missing = [c for c in required if c not in (reader.fieldnames or [])]
            if missing:
                raise InvalidInput(
                    source,
                    [Problem((), "bad-header", f"missing column(s) {', '.join(missing)}", f"columns: {', '.join(required)}", line=1)],
                )
            return [dict(r, _line=str(reader.line_num)) for r in reader]
    except FileNotFoundError:
        raise InvalidInput(source, [Problem((), "file-not-found", "no such file", "check the path")]) from None


def _ints(rows: list[dict[str, str]], key: str, source: str) -> IntArray:
    out = []
    for r in rows:
        value = (r.get(key) or "").strip()
        if not value.isdigit():
            raise _bad(source, int(r["_line"]), f"{key} is {value!r}, not a whole number ≥ 0")
        out.append(int(value))
    return np.asarray(out, dtype=np.int64)


def load_nodes(path: str | Path) -> Nodes:
    p = Path(path)
    rows = _read(p, ("sn", "cpu_milli", "memory_mib", "gpu", "model"))
    gpus = _ints(rows, "gpu", str(p))
    if (gpus > MAX_GPUS).any():
        line = int(rows[int(np.argmax(gpus > MAX_GPUS))]["_line"])
        raise _bad(str(p), line, f"more than {MAX_GPUS} GPUs on a node")
    return Nodes(
        tuple(r["sn"] for r in rows),
        _ints(rows, "cpu_milli", str(p)),
        _ints(rows, "memory_mib", str(p)),
        gpus,
        tuple(r["model"] for r in rows),
    )


def load_pods(path: str | Path) -> Pods:
    p = Path(path)
    rows = _read(p, ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"))
    num_gpu = _ints(rows, "num_gpu", str(p))
    milli = _ints(rows, "gpu_milli", str(p))
    for r, n, m in zip(rows, num_gpu, milli, strict=True):
        if m > MILLI or (n > 1 and m != MILLI) or (n > 0 and m == 0):
            raise _bad(str(p), int(r["_line"]), f"num_gpu {n} with gpu_milli {m} is not a valid request")
    spec = tuple(frozenset(x for x in (r.get("gpu_spec") or "").split("|") if x) for r in rows)
    order = sorted(range(len(rows)), key=lambda i: rows[i]["name"])
    pick = np.asarray(order, dtype=np.int64)
    return Pods(
        tuple(rows[i]["name"] for i in order),
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

    def feasible(self, pods: Pods, i: int) -> npt.NDArray[np.bool_]:
        ok = (self.cpu >= pods.cpu[i]) & (self.mem >= pods.mem[i])
        spec = pods.spec[i]
        if spec:
            allowed = [self.model_ids[m] for m in spec if m in self.model_ids]
            ok &= np.isin(self.model, allowed)
        n, m = int(pods.num_gpu[i]), int(pods.gpu_milli[i])
        if n == 0:
            return ok
        if m < MILLI:
            return ok & (self.left >= m).any(axis=1)
        return ok & ((self.left == MILLI).sum(axis=1) >= n)

    def place(
        self, pods: Pods, i: int, node: int, gpu_rng: np.random.Generator | None = None
    ) -> None:
        """`gpu_rng`: pick a share pod's GPU at random among those it fits, instead of the
        fullest one (the published random policy's GPU choice)."""
        self.cpu[node] -= pods.cpu[i]
        self.mem[node] -= pods.mem[i]
        n, m = int(pods.num_gpu[i]), int(pods.gpu_milli[i])
        if n == 0:
            return
        row = self.left[node]
        if m < MILLI and gpu_rng is not None:
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


def best_fit(c: FillCluster, pods: Pods, i: int, cand: npt.NDArray[np.intp]) -> npt.NDArray[np.float64]:
    """Least weighted leftover of CPU and GPU after placing (higher score = less left)."""
    cpu_after = (c.cpu[cand] - pods.cpu[i]) / MAX_SPEC_CPU
    gpu_after = (c.gpu_left()[cand] - pods.num_gpu[i] * pods.gpu_milli[i]) / MAX_SPEC_GPU
    return np.asarray(-(0.5 * cpu_after + 0.5 * gpu_after), dtype=np.float64)


def random_fit(c: FillCluster, pods: Pods, i: int, cand: npt.NDArray[np.intp]) -> npt.NDArray[np.float64]:
    return np.zeros(len(cand), dtype=np.float64)


POLICIES: dict[str, Score] = {"random": random_fit, "best-fit": best_fit}


@dataclass(frozen=True)
class FillRun:
    policy: str
    seed: int
    ratio_at: dict[int, float]  # arrived % -> allocation ratio %


def run_fill(nodes: Nodes, pods: Pods, policy: str, seed: int) -> FillRun:
    score = POLICIES[policy]
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
        node = int(cand[best[int(tie_rng.integers(len(best)))]])
        cluster.place(pods, i, node, tie_rng if policy == "random" else None)
        allocated += req
    for m in marks:
        ratio_at[m] = 100 * allocated / capacity
    return FillRun(policy, seed, ratio_at)
