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

from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from gpucarve.engine import FragmentModel, Reach, RequestType, fragment_model_of, near_best
from gpucarve.sim.fill.marks import FillRun, Marks
from gpucarve.sim.fill.trace import (
    MAX_GPUS,
    MAX_SPEC_CPU,
    MAX_SPEC_GPU,
    MILLI,
    IntArray,
    Nodes,
    Pods,
    arrival_order,
)


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


class Fragmentation:
    """gpucarve's placement for this experiment on its own arrays: the engine's fragmentation
    model (`engine.fragment`) with each node's GPU model as its access class and the demand of
    the engine (the pods placed so far and the one arriving)."""

    def __init__(self, cluster: FillCluster, pods: Pods) -> None:
        self.gpu_choice: npt.NDArray[np.intp] | None = None  # per candidate, for share pods
        ids = cluster.model_ids
        self.types = [
            RequestType(
                int(pods.cpu[i]),
                int(pods.num_gpu[i]),
                int(pods.gpu_milli[i]),
                frozenset(ids[m] for m in pods.spec[i] if m in ids) if pods.spec[i] else None,
            )
            for i in range(len(pods.names))
        ]
        self.classes = len(ids)
        gpus = cluster.nodes.gpus
        self.capacity = Reach.of(cluster.model, cluster.nodes.cpu, gpus, gpus.astype(np.float64))
        self.demand: Counter[RequestType] = Counter()
        self.model: tuple[Any, FragmentModel] | None = None

    def observe(self, i: int) -> None:
        self.demand[self.types[i]] += 1

    def forget(self, i: int) -> None:
        """A pod that fits nowhere leaves (the experiment never retries it)."""
        self.demand[self.types[i]] -= 1

    def __call__(
        self, c: FillCluster, pods: Pods, i: int, cand: npt.NDArray[np.intp]
    ) -> npt.NDArray[np.float64]:
        self.model = fragment_model_of(self.demand, self.classes, self.model, self.capacity)
        t = self.types[i]
        score, self.gpu_choice = self.model[1].score(
            c.left[cand], c.cpu[cand], c.model[cand], t.cpu, t.num_gpu, t.milli
        )
        # on the engine's scale (`ModelPlacer`'s, for a profile of fragmentation alone), so that
        # ties are the same ties
        return np.asarray(100.0 * score / max(1, t.num_gpu * t.milli), dtype=np.float64)


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


# The engine's model on this module's arrays: a fast reference for the engine path
# (`sim/fill/engine.py`), held to the same placements by a test.
REFERENCE = "gpucarve-array"


def run_fill(nodes: Nodes, pods: Pods, policy: str, seed: int) -> FillRun:
    cluster = FillCluster(nodes)
    score = Fragmentation(cluster, pods) if policy == REFERENCE else POLICIES[policy]
    observe = getattr(score, "observe", None)
    forget = getattr(score, "forget", None)
    capacity = nodes.gpu_capacity
    order = arrival_order(pods, capacity, seed)
    tie_rng = np.random.default_rng(seed)
    marks = Marks(pods, capacity)
    for i in order:
        marks.arrive(i)
        if observe is not None:
            observe(i)
        cand = np.flatnonzero(cluster.feasible(pods, i))
        if len(cand) == 0:
            if forget is not None:
                forget(i)
            marks.drop(i)
            continue
        s = score(cluster, pods, i, cand)
        if policy == REFERENCE:
            pick = int(np.flatnonzero(near_best(s))[0])  # ties: the lowest node, as the engine
        else:
            # the published policies break ties as kube-scheduler does: a seeded random pick
            best = np.flatnonzero(s >= s.max() - 1e-12)
            pick = int(best[int(tie_rng.integers(len(best)))])
        node = int(cand[pick])
        choice = getattr(score, "gpu_choice", None)
        gpu = int(choice[pick]) if choice is not None else None
        cluster.place(pods, i, node, tie_rng if policy == "random" else None, gpu)
        marks.placed(i)
    return marks.run(policy, seed)
