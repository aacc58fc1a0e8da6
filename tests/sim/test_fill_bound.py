"""The fill experiment's upper bound: above every policy and the exact optimum, and equal to the
optimum where only GPU packing limits it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

import gpucarve.sim.fill.bound as fill_bound
from gpucarve.sim.fill.bound import arrived_at, bound_ratios, exact_fill, upper_bound
from gpucarve.sim.fill.engine import run_fill_engine
from gpucarve.sim.fill.experiment import REFERENCE, run_fill
from gpucarve.sim.fill.trace import Nodes, Pods, arrival_order, load_nodes, load_pods
from tests.sim.fill_files import NODES_HEAD, PODS_HEAD, write


def test_shares_that_cannot_pair_do_not_fill_a_gpu(tmp_path: Path) -> None:
    # Two 600-milli shares and one GPU: pooling milli would say 1000; one GPU holds one.
    nodes = load_nodes(write(tmp_path, "n.csv", NODES_HEAD + "a,8000,8000,1,T4\n"))
    pods = load_pods(write(tmp_path, "p.csv", PODS_HEAD + "x,1000,10,1,600,\ny,1000,10,1,600,\n"))
    b = upper_bound(nodes, pods, [0, 1])
    assert b.milli == pytest.approx(600.0)
    assert b.left_out == pytest.approx({(1, 600): 1.0})
    assert exact_fill(nodes, pods, [0, 1]) == pytest.approx(600.0)


def _pairing_case(tmp_path: Path) -> tuple[Nodes, Pods, list[int]]:
    """Two 2-GPU nodes; shares of 600, 600, 600 and 400 and a 2-GPU pod."""
    nodes = load_nodes(
        write(tmp_path, "n.csv", NODES_HEAD + "a,64000,64000,2,T4\nb,64000,64000,2,P100\n")
    )
    rows = ["p600,1000,10,1,600,", "p400,1000,10,1,400,", "q600,1000,10,1,600,"]
    rows += ["w2,1000,10,2,1000,", "z600,1000,10,1,600,"]
    pods = load_pods(write(tmp_path, "p.csv", PODS_HEAD + "\n".join(rows) + "\n"))
    everyone = list(range(len(rows)))
    return nodes, pods, everyone


def test_tight_where_only_gpu_packing_limits(tmp_path: Path) -> None:
    # CPU and memory to spare: the optimum puts the 2-GPU pod on one node, 600+400 and 600 on
    # the other's GPUs, and leaves a 600 out: 3,600. Pooling the free milli would say 4,000.
    nodes, pods, everyone = _pairing_case(tmp_path)
    exact = exact_fill(nodes, pods, everyone)
    assert exact == pytest.approx(3600.0)
    bound = upper_bound(nodes, pods, everyone)
    assert bound.milli == pytest.approx(exact)
    # what it leaves out is what keeps it below the arrived request: one 600 of the three
    assert bound.left_out == pytest.approx({(1, 600): 1.0})


def test_model_limits_are_kept(tmp_path: Path) -> None:
    nodes = load_nodes(write(tmp_path, "n.csv", NODES_HEAD + "a,8000,8000,1,T4\n"))
    pods = load_pods(write(tmp_path, "p.csv", PODS_HEAD + "x,1000,10,1,1000,P100\n"))
    assert upper_bound(nodes, pods, [0]).milli == pytest.approx(0.0)
    assert exact_fill(nodes, pods, [0]) == pytest.approx(0.0)


def test_bound_is_above_the_exact_optimum_and_every_policy(tmp_path: Path) -> None:
    # A small cluster where CPU binds too: the bound pools a class's CPU, so it may sit above
    # the optimum, never below it, and every policy of the experiment stays under both.
    node_rows = ["a,16000,65536,2,T4", "b,16000,65536,2,T4", "c,32000,131072,4,V100M16"]
    nodes = load_nodes(write(tmp_path, "n.csv", NODES_HEAD + "\n".join(node_rows) + "\n"))
    shapes = [
        "6000,8192,1,500,",
        "2000,4096,1,300,",
        "8000,16384,2,1000,",
        "4000,8192,1,1000,V100M16",
        "12000,4096,1,200,",
        "1000,2048,1,810,T4",
    ]
    pod_rows = [f"p{i:02d},{shapes[i % len(shapes)]}" for i in range(14)]
    pods = load_pods(write(tmp_path, "p.csv", PODS_HEAD + "\n".join(pod_rows) + "\n"))
    for seed in (1, 2):
        order = arrival_order(pods, nodes.gpu_capacity, seed)
        arrived = arrived_at(pods, order, nodes.gpu_capacity, 130)
        bound = upper_bound(nodes, pods, arrived)
        exact = exact_fill(nodes, pods, arrived)
        assert bound.milli >= exact - 1e-6
        # the bound gives out or leaves out every arrived milli, as each run does below
        assert bound.milli + _milli(bound.left_out) == pytest.approx(_arrived(pods, arrived))
        ratios = bound_ratios(nodes, pods, seed)
        runs = [run_fill(nodes, pods, p, seed) for p in ("best-fit", "random", REFERENCE)]
        for run in [*runs, run_fill_engine(nodes, pods, seed)]:
            for mark, value in run.ratio_at.items():
                assert value <= ratios[mark] + 1e-6, (run.policy, mark)
                given = value * nodes.gpu_capacity / 100
                came = _arrived(pods, arrived_at(pods, order, nodes.gpu_capacity, mark))
                assert given + _milli(run.dropped_at[mark]) == pytest.approx(came)
            assert run.ratio_at[130] * nodes.gpu_capacity / 100 <= exact + 1e-6
        assert any(run.dropped_at[130] for run in runs)  # the case exercises drops at all


def _milli(shapes: Mapping[tuple[int, int], float]) -> float:
    return sum(n * m * count for (n, m), count in shapes.items())


def _arrived(pods: Pods, arrived: Sequence[int]) -> float:
    return float(sum(int(pods.num_gpu[i]) * int(pods.gpu_milli[i]) for i in arrived))


def test_exact_refuses_large_instances(tmp_path: Path) -> None:
    rows = "".join(f"n{i},64000,64000,8,T4\n" for i in range(20))
    nodes = load_nodes(write(tmp_path, "n.csv", NODES_HEAD + rows))
    pods = load_pods(
        write(tmp_path, "p.csv", PODS_HEAD + "".join(f"p{i},1,1,1,100,\n" for i in range(40)))
    )
    with pytest.raises(ValueError, match="small instances"):
        exact_fill(nodes, pods, list(range(40)))


def test_still_a_bound_when_column_generation_runs_out_of_rounds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One round finds only the first patterns (a GPU of one share size), which miss the
    # 600 + 400 pairing: the master alone says 3,200. Farley's term keeps it above 3,600.
    nodes, pods, everyone = _pairing_case(tmp_path)
    monkeypatch.setattr(fill_bound, "MAX_ROUNDS", 1)
    cut = upper_bound(nodes, pods, everyone)
    assert cut.rounds == 1
    assert cut.milli >= exact_fill(nodes, pods, everyone) - 1e-6
