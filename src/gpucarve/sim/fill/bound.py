"""How far from optimal: an upper bound on the fill experiment's allocation ratio.

For the pods that have arrived, no placement (online or offline) allocates more GPU than the
optimum of this linear program, solved with HiGHS:

- nodes are grouped into classes of equal (model, GPUs, CPU, memory); pods into types of equal
  (CPU, memory, GPUs, milli per GPU, allowed models);
- `y[t, c]`: pods of type `t` on nodes of class `c` (only where one such pod fits an empty node
  of `c` and its model is allowed), at most the number of pods of `t` that arrived;
- the pods on a class use at most its nodes' CPU, memory and GPUs together;
- share pods ride on GPUs packed by *patterns* (how many shares of each size one GPU holds, at
  most 1000 milli): `u[c, q]` GPUs of class `c` carry pattern `q`. Patterns are generated as
  needed (column generation: the best one for the current duals is an unbounded knapsack
  over one GPU's 1000 milli), so shares that cannot pair up, such as two 600s, are not counted
  as filling a GPU.

The bound relaxes two things, and so may sit above what any packing attains: a class's CPU and
memory are pooled across its nodes, and pods may be split between classes. `exact_fill` solves
small instances exactly (a mixed-integer program over every node and GPU) to show how tight it
is.

It also says which pods the optimum leaves out (`Bound.left_out`, by GPU shape). The fill
experiment places every pod that fits somewhere, so a policy cannot leave a pod out while a
slot for it is free; where the bound's headroom is pods of a shape the policies place (the
810-milli share that leaves 190 no other share fills), that headroom is out of reach of every
policy of the experiment, not a flaw of one.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import highspy
import numpy as np

from gpucarve.sim.fill.marks import MARKS
from gpucarve.sim.fill.trace import MILLI, Nodes, Pods, arrival_order

MAX_ROUNDS = 200  # column generation rounds; each adds the best pattern per class
EXACT_LIMIT = 4_000  # binary variables `exact_fill` accepts (it is for small instances)
EPS = 1e-7


@dataclass(frozen=True)
class Bound:
    milli: float  # the LP's optimum: allocated milli-GPU at most
    capacity: int
    rounds: int  # column generation rounds
    # pods of each GPU shape (GPUs, milli per GPU) that the LP's optimum does not place; a
    # fraction where the LP splits a group
    left_out: dict[tuple[int, int], float] = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        return 100 * self.milli / self.capacity


_banner_shown = False


def _highs() -> highspy.Highs:
    global _banner_shown
    if not _banner_shown:
        # HiGHS prints its banner on the standard output when the first solver is made, before
        # any option can be set: send it to stderr so `--json` output stays one document.
        sys.stdout.flush()
        saved = os.dup(1)
        try:
            os.dup2(2, 1)
            h = highspy.Highs()  # type: ignore[no-untyped-call]
        finally:
            os.dup2(saved, 1)
            os.close(saved)
        _banner_shown = True
    else:
        h = highspy.Highs()  # type: ignore[no-untyped-call]
    h.setOptionValue("output_flag", False)
    return h


@dataclass
class _Lp:
    """Columns and rows built up before one HiGHS model is passed."""

    cost: list[float]
    upper: list[float]
    cols: list[dict[int, float]]

    def col(self, cost: float, entries: dict[int, float], upper: float = highspy.kHighsInf) -> int:
        self.cost.append(cost)
        self.upper.append(upper)
        self.cols.append(entries)
        return len(self.cost) - 1


def upper_bound(nodes: Nodes, pods: Pods, arrived: Sequence[int]) -> Bound:
    """An upper bound on the milli-GPU the pods `arrived` (indices into `pods`, repeats allowed)
    can be given on `nodes`."""
    return BoundLp(nodes, pods, arrived).solve()


Kind = tuple[int, int, int, int, frozenset[str]]  # (CPU, memory, GPUs, milli, models)


def kind_of(pods: Pods, i: int) -> Kind:
    return (
        int(pods.cpu[i]),
        int(pods.mem[i]),
        int(pods.num_gpu[i]),
        int(pods.gpu_milli[i]),
        pods.spec[i],
    )


class BoundLp:
    """The LP above, built once for a set of arrived pods and solved for any sub-case: fewer pods
    of a group (some known to be left out) and a floor on the pods of a group that are placed
    (some known to be placed). Patterns found for one case stay valid columns for the next, so
    the cases after the first take a few rounds each."""

    def __init__(self, nodes: Nodes, pods: Pods, arrived: Sequence[int]) -> None:
        self.capacity = nodes.gpu_capacity
        classes = Counter(
            (nodes.model[k], int(nodes.gpus[k]), int(nodes.cpu[k]), int(nodes.mem[k]))
            for k in range(len(nodes.names))
        )
        cls = sorted(classes)
        self.arrived = [kind_of(pods, i) for i in arrived]  # in arrival order
        self.types = Counter(self.arrived)
        kinds = self.kinds = sorted(self.types, key=lambda t: (t[:4], sorted(t[4])))
        shares = sorted({t[3] for t in kinds if t[2] == 1 and t[3] < MILLI})
        # rows: per type; per class CPU, memory, GPUs; per (class, share size) the link
        row_up: list[float] = []

        def row(bound: float) -> int:
            row_up.append(bound)
            return len(row_up) - 1

        self.type_row = [row(self.types[t]) for t in kinds]
        self.rows = np.asarray(self.type_row, dtype=np.int32)
        cpu_row, mem_row, gpu_row, link = {}, {}, {}, {}
        for c in cls:
            model, gpus, cpu, mem = c
            n = classes[c]
            cpu_row[c], mem_row[c], gpu_row[c] = row(n * cpu), row(n * mem), row(n * gpus)
            for s in shares:
                link[(c, s)] = row(0.0)
        lp = _Lp([], [], [])
        self.placed_by: list[tuple[int, int]] = []  # (column, type index) of placement columns
        top = 0.0  # the most milli one pod asks: the price of a floor not met, per pod
        for k, t in enumerate(kinds):
            t_cpu, t_mem, t_n, t_m, spec = t
            top = max(top, float(t_n * t_m))
            for c in cls:
                model, gpus, cpu, mem = c
                if t_cpu > cpu or t_mem > mem or t_n > gpus or (spec and model not in spec):
                    continue
                entries = {
                    self.type_row[k]: 1.0,
                    cpu_row[c]: float(t_cpu),
                    mem_row[c]: float(t_mem),
                }
                if t_n and t_m < MILLI:
                    entries[link[(c, t_m)]] = 1.0
                elif t_n:
                    entries[gpu_row[c]] = float(t_n)
                self.placed_by.append((lp.col(-float(t_n * t_m), entries), k))
        # a floor not met costs more than any pod is worth: the LP stays feasible whatever the
        # floor (column generation needs a feasible start), and its value is still an upper
        # bound on every placement that meets the floor
        penalty = 2 * top + 1.0
        for k in range(len(kinds)):
            lp.col(penalty, {self.type_row[k]: 1.0})
        # start with one pattern per share size: as many of it as one GPU holds
        for c in cls:
            if c[1] == 0:
                continue
            for s in shares:
                lp.col(0.0, {gpu_row[c]: 1.0, link[(c, s)]: -float(MILLI // s)})
        self.h = _highs()
        _load(self.h, lp, row_up)
        self.cls, self.classes, self.shares = cls, classes, shares
        self.gpu_row, self.link = gpu_row, link

    def solve(
        self, fewer: Counter[Kind] | None = None, floor: Counter[Kind] | None = None
    ) -> Bound:
        """The bound with `fewer[t]` pods of group `t` taken out and at least `floor[t]` of
        those left placed."""
        fewer, floor = fewer or Counter(), floor or Counter()
        up = np.asarray([self.types[t] - fewer[t] for t in self.kinds], dtype=np.float64)
        lo = np.asarray([floor[t] for t in self.kinds], dtype=np.float64)
        # in highspy, not in its type stubs
        self.h.changeRowsBounds(len(self.rows), self.rows, lo, up)  # type: ignore[attr-defined]
        h, rounds, unpriced = self.h, 0, 0.0
        while True:
            rounds += 1
            h.run()
            dual = h.getSolution().row_dual
            found: list[dict[int, float]] = []
            unpriced = 0.0
            for c in self.cls:
                if c[1] == 0 or not self.shares:
                    continue
                # pattern value: sum of -dual(link) per share; worth adding when it beats the
                # GPU's own price
                values = [-dual[self.link[(c, s)]] for s in self.shares]
                price = -dual[self.gpu_row[c]]
                if MILLI * max(v / s for s, v in zip(self.shares, values, strict=True)) <= price:
                    continue  # not even a fractional filling beats the GPU's price
                best, counts = _knapsack(self.shares, values)
                gain = best - price
                if gain > EPS:
                    # no more GPUs of the class than it has carry patterns: Farley's bound
                    unpriced += gain * self.classes[c] * c[1]
                    entries = {self.gpu_row[c]: 1.0}
                    for s, k in zip(self.shares, counts, strict=True):
                        if k:
                            entries[self.link[(c, s)]] = -float(k)
                    found.append(entries)
            if not found or rounds >= MAX_ROUNDS:
                break  # converged (nothing unpriced), or out of rounds: the last solve stands
            for entries in found:
                _add_col(h, 0.0, entries)
        value = h.getSolution().col_value
        placed = [0.0] * len(self.kinds)
        for col, k in self.placed_by:
            placed[k] += value[col]
        left_out: dict[tuple[int, int], float] = {}
        for k, t in enumerate(self.kinds):
            gone = self.types[t] - placed[k]
            if t[2] and gone > EPS:
                left_out[(t[2], t[3])] = left_out.get((t[2], t[3]), 0.0) + gone
        # the master's optimum over the patterns found, plus what the patterns not found could
        # add when the rounds ran out (zero once column generation has converged)
        optimum = -h.getInfo().objective_function_value + unpriced
        return Bound(optimum, self.capacity, rounds, dict(sorted(left_out.items())))


def _knapsack(sizes: Sequence[int], values: Sequence[float]) -> tuple[float, list[int]]:
    """The most valuable multiset of `sizes` in one GPU (unbounded knapsack over 1000 milli)."""
    # only sizes worth something can be picked; plain lists, since this loop is most of a
    # bound's time and NumPy's per-element access is slower than a list's
    items = [(k, s, v) for k, (s, v) in enumerate(zip(sizes, values, strict=True)) if v > 0]
    best = [0.0] * (MILLI + 1)
    pick = [-1] * (MILLI + 1)
    for w in range(1, MILLI + 1):
        here, took = best[w - 1], -1
        for k, s, v in items:
            if s <= w and best[w - s] + v > here + EPS:
                here, took = best[w - s] + v, k
        best[w], pick[w] = here, took
    counts = [0] * len(sizes)
    w = MILLI
    while w > 0:
        k = pick[w]
        if k < 0:
            w -= 1
        else:
            counts[k] += 1
            w -= sizes[k]
    return best[MILLI], counts


def _load(h: highspy.Highs, lp: _Lp, row_up: list[float]) -> None:
    inf = highspy.kHighsInf
    h.addRows(
        len(row_up),
        np.full(len(row_up), -inf),
        np.asarray(row_up, dtype=np.float64),
        0,
        np.zeros(0, dtype=np.int32),
        np.zeros(0, dtype=np.int32),
        np.zeros(0),
    )
    for cost, up, entries in zip(lp.cost, lp.upper, lp.cols, strict=True):
        _add_col(h, cost, entries, up)


def _add_col(
    h: highspy.Highs, cost: float, entries: dict[int, float], upper: float = highspy.kHighsInf
) -> None:
    idx = np.asarray(sorted(entries), dtype=np.int32)
    val = np.asarray([entries[int(i)] for i in idx], dtype=np.float64)
    h.addCol(cost, 0.0, upper, len(idx), idx, val)


def exact_fill(nodes: Nodes, pods: Pods, arrived: Sequence[int]) -> float:
    """The most milli-GPU any placement gives the pods `arrived`: a mixed-integer program with
    one binary per (pod, node, GPU choice). Small instances only (`EXACT_LIMIT` binaries)."""
    pod_ids = list(arrived)
    n_nodes = len(nodes.names)
    # x[p, k, g]: share pod p on GPU g of node k; whole pods: x[p, k] and w[p, k, g] for the GPUs
    lp = _Lp([], [], [])
    row_up: list[float] = []

    def row(bound: float) -> int:
        row_up.append(bound)
        return len(row_up) - 1

    one = [row(1.0) for _ in pod_ids]
    cpu = [row(float(nodes.cpu[k])) for k in range(n_nodes)]
    mem = [row(float(nodes.mem[k])) for k in range(n_nodes)]
    gpu = [[row(float(MILLI)) for _ in range(int(nodes.gpus[k]))] for k in range(n_nodes)]
    binaries: list[int] = []
    for j, i in enumerate(pod_ids):
        n, m, spec = int(pods.num_gpu[i]), int(pods.gpu_milli[i]), pods.spec[i]
        for k in range(n_nodes):
            if (spec and nodes.model[k] not in spec) or n > nodes.gpus[k]:
                continue
            base = {one[j]: 1.0, cpu[k]: float(pods.cpu[i]), mem[k]: float(pods.mem[i])}
            if n == 0:
                binaries.append(lp.col(0.0, base, 1.0))
            elif m < MILLI:
                for g in range(int(nodes.gpus[k])):
                    binaries.append(lp.col(-float(m), {**base, gpu[k][g]: float(m)}, 1.0))
            else:
                # whole GPUs: one binary for "on node k", and one per GPU it holds there
                on = row(0.0)  # n * on - sum(gpu binaries) <= 0
                base[on] = float(n)
                binaries.append(lp.col(-float(n * m), base, 1.0))
                for g in range(int(nodes.gpus[k])):
                    binaries.append(lp.col(0.0, {on: -1.0, gpu[k][g]: float(MILLI)}, 1.0))
    if len(binaries) > EXACT_LIMIT:
        raise ValueError(f"{len(binaries)} binaries: exact_fill is for small instances")
    h = _highs()
    _load(h, lp, row_up)
    for b in binaries:
        h.changeColIntegrality(b, highspy.HighsVarType.kInteger)
    h.run()
    return float(-h.getInfo().objective_function_value)


def arrived_at(pods: Pods, order: Sequence[int], capacity: int, mark: int) -> list[int]:
    """The longest prefix of `order` whose requested milli-GPU is at most `mark` % of
    `capacity` (the experiment's "arrived X %")."""
    requests = pods.request()
    out: list[int] = []
    total = 0
    for i in order:
        total += int(requests[i])
        if total > mark / 100 * capacity:
            break
        out.append(i)
    return out


def bounds_at(nodes: Nodes, pods: Pods, seed: int) -> dict[int, Bound]:
    """The bound at each of the experiment's marks, for one seed's arrivals."""
    order = arrival_order(pods, nodes.gpu_capacity, seed)
    return {
        mark: upper_bound(nodes, pods, arrived_at(pods, order, nodes.gpu_capacity, mark))
        for mark in MARKS
    }


def bound_ratios(nodes: Nodes, pods: Pods, seed: int) -> dict[int, float]:
    """The bound (% of capacity) at each of the experiment's marks, for one seed's arrivals."""
    return {mark: b.ratio for mark, b in bounds_at(nodes, pods, seed).items()}
