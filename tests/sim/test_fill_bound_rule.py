"""The bound under the experiment's rule (a pod that fits is placed): above every run the rule
allows, found here by trying every placement of small cases, and below the free bound where the
free optimum leaves out a pod that a run must place."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from gpucarve.sim.fill.bound import arrived_at, upper_bound
from gpucarve.sim.fill.bound_rule import bounds_at, rule_bound
from gpucarve.sim.fill.engine import run_fill_engine
from gpucarve.sim.fill.experiment import REFERENCE, run_fill
from gpucarve.sim.fill.trace import MILLI, Nodes, Pods, arrival_order, load_nodes, load_pods
from tests.sim.fill_files import NODES_HEAD, PODS_HEAD, write

State = tuple[tuple[int, int, tuple[int, ...]], ...]  # per node: CPU, memory, free per GPU


def best_run(nodes: Nodes, pods: Pods, arrived: Sequence[int]) -> int:
    """The most milli-GPU any run of the experiment gives `arrived`: every pod that fits is
    placed, on any node and any GPU that fits it."""
    start: State = tuple(
        (int(nodes.cpu[k]), int(nodes.mem[k]), (MILLI,) * int(nodes.gpus[k]))
        for k in range(len(nodes.names))
    )

    def options(state: State, i: int) -> list[State]:
        n, m = int(pods.num_gpu[i]), int(pods.gpu_milli[i])
        cpu, mem, spec = int(pods.cpu[i]), int(pods.mem[i]), pods.spec[i]
        out = []
        for k, (c, r, free) in enumerate(state):
            if c < cpu or r < mem or (spec and nodes.model[k] not in spec):
                continue
            picks: list[tuple[int, ...]] = []
            if n == 0:
                picks = [free]
            elif m < MILLI:
                picks = [(*free[:g], free[g] - m, *free[g + 1 :]) for g in range(len(free))]
                picks = [p for p in picks if min(p) >= 0]
            elif sum(f == MILLI for f in free) >= n:
                whole = [g for g, f in enumerate(free) if f == MILLI][:n]
                picks = [tuple(0 if g in whole else f for g, f in enumerate(free))]
            for p in set(picks):
                out.append((*state[:k], (c - cpu, r - mem, p), *state[k + 1 :]))
        return out

    def best(state: State, j: int) -> int:
        if j == len(arrived):
            return 0
        i = arrived[j]
        nexts = options(state, i)
        if not nexts:
            return best(state, j + 1)  # fits nowhere: dropped
        given = int(pods.num_gpu[i]) * int(pods.gpu_milli[i])
        return given + max(best(s, j + 1) for s in nexts)

    return best(start, 0)


def test_a_share_that_arrives_first_is_placed(tmp_path: Path) -> None:
    # One GPU; an 810 share, then a whole-GPU pod. Left free, the optimum drops the 810 and
    # gives out 1,000; every run places the 810 (it fits) and then has no room for the other.
    nodes = load_nodes(write(tmp_path, "n.csv", NODES_HEAD + "a,8000,8000,1,T4\n"))
    rows = "a,1000,10,1,810,\nb,2000,20,1,1000,\n"
    pods = load_pods(write(tmp_path, "p.csv", PODS_HEAD + rows))
    assert upper_bound(nodes, pods, [0, 1]).milli == pytest.approx(1000.0)
    assert rule_bound(nodes, pods, [0, 1]).milli == pytest.approx(810.0)
    assert best_run(nodes, pods, [0, 1]) == 810
    # the other way round the whole-GPU pod is placed first, and the rule takes nothing away
    assert rule_bound(nodes, pods, [1, 0]).milli == pytest.approx(1000.0)
    assert best_run(nodes, pods, [1, 0]) == 1000


def test_a_pod_that_does_not_dominate_is_not_taken_out(tmp_path: Path) -> None:
    # The whole-GPU pod asks for less CPU than the 810 share: a node without CPU for the share
    # may still host it, so the share's drop says nothing about it. The bound cannot rule out
    # that the share was dropped (it reasons about drops, not about what fits when), so with
    # the whole-GPU pod kept in that case it stays at the free optimum; taking it out would
    # give 810, below a run the rule allows were the CPU short.
    nodes = load_nodes(write(tmp_path, "n.csv", NODES_HEAD + "a,8000,8000,1,T4\n"))
    rows = "a,1000,10,1,810,\nb,500,20,1,1000,\n"
    pods = load_pods(write(tmp_path, "p.csv", PODS_HEAD + rows))
    got = rule_bound(nodes, pods, [0, 1]).milli
    assert got >= best_run(nodes, pods, [0, 1]) - 1e-6
    assert got == pytest.approx(1000.0)


CASES = [
    # (nodes, pod shapes, whether the rule bites somewhere): shares that pair badly, model
    # lists, CPU that binds
    (
        ["a,16000,65536,2,T4", "b,16000,65536,1,P100"],
        [
            "2000,4096,1,810,",
            "4000,8192,1,1000,",
            "2000,4096,1,470,",
            "1000,2048,1,810,T4",
            "8000,4096,1,470,",
            "2000,4096,2,1000,",
            "6000,4096,0,0,",
        ],
        True,
    ),
    (
        ["a,8000,32768,2,T4", "b,12000,32768,2,T4"],
        [
            "1000,1024,1,810,",
            "3000,1024,1,650,",
            "1000,1024,1,320,",
            "2000,1024,1,1000,",
            "1000,1024,1,160,",
            "4000,1024,1,810,",
        ],
        False,  # above every run only: its pods dominate few others
    ),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_above_every_run_and_below_the_free_bound(tmp_path: Path, case: int) -> None:
    node_rows, shapes, bites = CASES[case]
    nodes = load_nodes(write(tmp_path, "n.csv", NODES_HEAD + "\n".join(node_rows) + "\n"))
    rows = [f"p{i:02d},{shapes[i % len(shapes)]}" for i in range(9)]
    pods = load_pods(write(tmp_path, "p.csv", PODS_HEAD + "\n".join(rows) + "\n"))
    below = 0
    for seed in range(1, 7):
        both = bounds_at(nodes, pods, seed)
        order = arrival_order(pods, nodes.gpu_capacity, seed)
        for mark, (free, rule) in both.items():
            arrived = arrived_at(pods, order, nodes.gpu_capacity, mark)
            if len(arrived) > 9:
                continue  # the search below tries every run: keep it small
            top = best_run(nodes, pods, arrived)
            assert rule.milli >= top - 1e-6, (seed, mark)
            assert rule.milli <= free.milli + 1e-6
            below += rule.milli < free.milli - 1e-6
        runs = [run_fill(nodes, pods, p, seed) for p in ("best-fit", "random", REFERENCE)]
        for run in [*runs, run_fill_engine(nodes, pods, seed)]:
            for mark, value in run.ratio_at.items():
                assert value <= both[mark][1].ratio + 1e-6, (run.policy, seed, mark)
    assert below or not bites, "the rule never bit: the case does not test it"


def test_a_pod_free_to_go_elsewhere_is_not_taken_out(tmp_path: Path) -> None:
    # The T4 is taken first, so the T4-only share is dropped; the whole-GPU pod after it asks
    # for more of everything but may use the P100, where it fits: the share's drop must not
    # take it out (only pods limited to the share's models are).
    nodes = load_nodes(
        write(tmp_path, "n.csv", NODES_HEAD + "a,8000,8000,1,T4\nb,8000,8000,1,P100\n")
    )
    rows = "a,1000,10,1,1000,T4\nb,1000,10,1,810,T4\nc,2000,20,1,1000,\n"
    pods = load_pods(write(tmp_path, "p.csv", PODS_HEAD + rows))
    assert best_run(nodes, pods, [0, 1, 2]) == 2000
    assert rule_bound(nodes, pods, [0, 1, 2]).milli == pytest.approx(2000.0)
