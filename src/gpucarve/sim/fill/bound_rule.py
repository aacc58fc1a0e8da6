"""A bound for the fill experiment's own rule: a pod that fits somewhere is placed.

The LP of `fill_bound` may leave out any pod, so its optimum drops the pods that pack worst
(on the public trace, the 810-milli share, whose GPU keeps 190 milli that almost nothing fills).
No policy of the experiment may do that while a slot for such a pod is free. This bound keeps
the rule, by cases on the first pod of that shape (the *pivot*) that any run drops:

- none dropped: every pivot pod that arrived is placed (a floor on the LP's pods);
- the first dropped is the pivot pod of arrival `x`: the pivot pods before it are placed, and
  every later pod that *dominates* it is dropped too. No pod leaves, so a node that could not
  host `x` cannot host a pod that asks at least as much of everything: as much CPU and memory,
  a GPU with at least as much free (a whole GPU is at least an 810 share), and a model list no
  wider (any list where `x` has none).

Pivot pods with different model lists form separate groups (a pod with a list is dominated only
by pods whose list lies within it), each with its own first drop; a case fixes one for each.
Every run falls in one case, so the largest case value bounds every run. The cases are taken an
interval of a group's arrivals at a time (its pods before the interval placed, the later pods
that dominate every one of its pods in the interval dropped), so each LP bounds all the cases it
stands for; branch and bound splits the one with the largest value until it is one case or the
LP budget is spent. What is left unsplit still bounds its cases: the result is valid at any
budget. A case where a pod is sure to be placed and sure to be dropped holds no run.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpucarve.sim.fill.bound import Bound, BoundLp, Kind, arrived_at
from gpucarve.sim.fill.marks import MARKS
from gpucarve.sim.fill.trace import MILLI, Nodes, Pods, arrival_order

FIRST_SPLIT = 8  # intervals of a group's arrivals when its cases are first taken apart
BUDGET = 200  # LP solves per bound, the first included (each a few rounds from a warm start)
MAX_GROUPS = 3  # pivot groups: the pivot shape's most common model lists (none is one)
MIN_GROUP = 0.02  # of the pivot shape's pods: smaller groups are left free

BoolArray = npt.NDArray[np.bool_]
State = tuple[int, int] | None  # per group: None, any case; (a, b), first drop among a..b-1
# (a == b == the group's size: none dropped)


@dataclass(frozen=True)
class _Group:
    at: npt.NDArray[np.int64]  # arrival positions of the group's pods
    dominated: Callable[[int, int], BoolArray]  # arrivals sure to be dropped if a..b-1 holds one


def rule_bound(nodes: Nodes, pods: Pods, arrived: Sequence[int], budget: int = BUDGET) -> Bound:
    """An upper bound on the milli-GPU any policy of the experiment gives the pods `arrived`
    (in arrival order), never above `fill_bound.upper_bound`'s."""
    return both_bounds(nodes, pods, arrived, budget)[1]


def both_bounds(
    nodes: Nodes, pods: Pods, arrived: Sequence[int], budget: int = BUDGET
) -> tuple[Bound, Bound]:
    """`fill_bound.upper_bound` (any pod may be left out) and `rule_bound`, from one LP."""
    lp = BoundLp(nodes, pods, arrived)
    free = lp.solve()
    pivot = _pivot(free)
    if pivot is None:
        return free, free
    kinds = lp.arrived
    groups = _groups(kinds, pivot)
    reach = np.arange(len(kinds))

    def case(states: tuple[State, ...]) -> Bound | None:
        """The LP for the cases `states` (per group), or None when no run can be in them: a pod
        sure to be placed (a group's, before its first drop) is sure to be dropped."""
        placed = np.zeros(len(kinds), dtype=np.bool_)
        dropped = np.zeros(len(kinds), dtype=np.bool_)
        for g, st in zip(groups, states, strict=True):
            if st is not None:
                placed[g.at[: st[0]]] = True
                if st[0] < st[1]:
                    dropped |= g.dominated(*st)
                if st[1] - st[0] == 1:
                    dropped[g.at[st[0]]] = True  # one case: that pod is the one dropped
        if (placed & dropped).any():
            return None
        floor = Counter(kinds[int(p)] for p in reach[placed])
        return lp.solve(Counter(kinds[int(p)] for p in reach[dropped]), floor)

    heap: list[tuple[float, int, tuple[State, ...], Bound]] = []
    serial = itertools.count()
    root: tuple[State, ...] = tuple(None for _ in groups)
    heapq.heappush(heap, (-free.milli, next(serial), root, free))
    solves = 1
    while True:
        _, _, states, _ = heap[0]
        children = _split(states, groups)
        if not children or solves + len(children) > budget:
            break  # the top holds single cases only, or the budget is spent
        heapq.heappop(heap)
        for child in children:
            got = case(child)
            solves += 1
            if got is not None:
                heapq.heappush(heap, (-got.milli, next(serial), child, got))
        if not heap:
            raise AssertionError("every case impossible: a run of the experiment is in one")
    top = heap[0][3]
    # the cases only add rules to the free LP: its value stays a bound as well
    return free, (top if top.milli < free.milli else free)


def bounds_at(nodes: Nodes, pods: Pods, seed: int) -> dict[int, tuple[Bound, Bound]]:
    """Both bounds at each of the experiment's marks, for one seed's arrivals."""
    order = arrival_order(pods, nodes.gpu_capacity, seed)
    return {
        mark: both_bounds(nodes, pods, arrived_at(pods, order, nodes.gpu_capacity, mark))
        for mark in MARKS
    }


def _split(states: tuple[State, ...], groups: Sequence[_Group]) -> list[tuple[State, ...]]:
    """The cases of `states` taken apart one step: a group still free into none dropped and
    intervals of its arrivals, else the widest interval into halves; [] if single cases."""
    for j, st in enumerate(states):
        if st is None:
            total = len(groups[j].at)
            edges = np.unique(np.linspace(0, total, min(FIRST_SPLIT, total) + 1).astype(np.int64))
            parts: list[State] = [(total, total)]
            parts += [(int(a), int(b)) for a, b in itertools.pairwise(edges)]
            return [(*states[:j], part, *states[j + 1 :]) for part in parts]
    widths = [st[1] - st[0] if st is not None else 0 for st in states]
    j = int(np.argmax(widths))
    st = states[j]
    if st is None or widths[j] <= 1:
        return []
    mid = (st[0] + st[1]) // 2
    return [(*states[:j], half, *states[j + 1 :]) for half in ((st[0], mid), (mid, st[1]))]


def _groups(kinds: Sequence[Kind], pivot: tuple[int, int]) -> list[_Group]:
    """The pivot shape's pods, one group per model list (a pod with a list is dominated only by
    pods whose list lies within it, so groups do not mix lists)."""
    cpu, mem, n, m = (np.asarray([k[j] for k in kinds], dtype=np.int64) for j in range(4))
    lists = sorted({k[4] for k in kinds if k[4]}, key=sorted)
    list_of = np.asarray([lists.index(k[4]) if k[4] else -1 for k in kinds], dtype=np.int64)
    reach = np.arange(len(kinds))
    shaped = [p for p, k in enumerate(kinds) if (k[2], k[3]) == pivot]
    by_list = Counter(kinds[p][4] for p in shaped)
    out = []
    for models, count in by_list.most_common(MAX_GROUPS):
        if count < MIN_GROUP * len(shaped):
            break
        at = np.asarray([p for p in shaped if kinds[p][4] == models], dtype=np.int64)
        # who dominates every pod of the group: a GPU at least the pivot's, a list within
        share = pivot[1] < MILLI
        base = (n > 0) & (m >= pivot[1]) if share else (m >= MILLI) & (n >= pivot[0])
        if models:
            inside = np.asarray([other <= models for other in lists], dtype=np.bool_)
            base &= (list_of >= 0) & inside[np.maximum(list_of, 0)]

        def dominated(
            a: int, b: int, at: npt.NDArray[np.int64] = at, base: BoolArray = base
        ) -> BoolArray:
            sure: BoolArray = base & (reach > at[b - 1])
            sure &= cpu >= int(cpu[at[a:b]].max())
            sure &= mem >= int(mem[at[a:b]].max())
            return sure

        out.append(_Group(at, dominated))
    return out


def _pivot(free: Bound) -> tuple[int, int] | None:
    """The GPU shape the free LP leaves out the most milli of, if any."""
    if not free.left_out:
        return None
    return max(free.left_out, key=lambda k: (free.left_out[k] * k[0] * k[1], k))
