"""The fill experiment through the engine: the same placements as the array reference, pod by
pod, on a hand-built cluster and on a sample of the public trace."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpucarve.engine.placement.frag_place import near_best
from gpucarve.sim.fill.engine import build, placements, run_fill_engine
from gpucarve.sim.fill.experiment import FillCluster, Fragmentation
from gpucarve.sim.fill.trace import Nodes, Pods, arrival_order, load_nodes, load_pods
from tests.paths import trace
from tests.sim.fill_files import NODES_HEAD, PODS_HEAD


def reference(nodes: Nodes, pods: Pods, seed: int, limit: int) -> list[tuple[int, str | None]]:
    """The array model's choices, ties to the lowest node as the engine breaks them."""
    cluster = FillCluster(nodes)
    score = Fragmentation(cluster, pods)
    out: list[tuple[int, str | None]] = []
    for i in arrival_order(pods, nodes.gpu_capacity, seed)[:limit]:
        score.observe(i)
        cand = np.flatnonzero(cluster.feasible(pods, i))
        if not len(cand):
            score.forget(i)  # a pod that fits nowhere leaves the demand, as in run_fill
            out.append((i, None))
            continue
        s = score(cluster, pods, i, cand)
        pick = int(np.flatnonzero(near_best(s))[0])
        gpu = int(score.gpu_choice[pick]) if score.gpu_choice is not None else None
        cluster.place(pods, i, int(cand[pick]), None, gpu)
        out.append((i, nodes.names[int(cand[pick])]))
    return out


def test_engine_and_reference_place_a_small_cluster_alike(tmp_path: Path) -> None:
    node_rows = [
        "a,32000,65536,4,T4",
        "b,16000,65536,2,T4",
        "c,64000,262144,8,V100M32",
        "d,32000,131072,2,P100",
        "e,96000,393216,8,G2",
    ]
    shapes = [
        "4000,8192,1,500,",
        "2000,4096,1,250,T4",
        "8000,16384,2,1000,",
        "4000,8192,1,1000,V100M32|P100",
        "12000,4096,0,0,",
        "1000,2048,1,810,",
        "16000,32768,4,1000,",
        "6000,8192,1,330,G2",
    ]
    (tmp_path / "n.csv").write_text(NODES_HEAD + "\n".join(node_rows) + "\n")
    pod_rows = [f"p{i:03d},{shapes[(i * 5) % len(shapes)]}" for i in range(60)]
    (tmp_path / "p.csv").write_text(PODS_HEAD + "\n".join(pod_rows) + "\n")
    nodes, pods = load_nodes(tmp_path / "n.csv"), load_pods(tmp_path / "p.csv")
    for seed in (1, 2, 3):
        got = placements(nodes, pods, seed, 80)
        assert got == reference(nodes, pods, seed, 80)
        assert any(node is None for _, node in got)  # the cluster fills: some pods are dropped
        assert len({node for _, node in got if node}) == len(node_rows)


def test_engine_and_reference_place_the_public_trace_alike() -> None:
    base = trace("alibaba-gpu-v2023")
    nodes = load_nodes(base / "openb_node_list_gpu_node.csv")
    pods = load_pods(base / "openb_pod_list_gpuspec20.csv")
    assert placements(nodes, pods, 43, 400) == reference(nodes, pods, 43, 400)


def test_engine_run_reports_every_mark_and_reuses_its_cluster(tmp_path: Path) -> None:
    (tmp_path / "n.csv").write_text(NODES_HEAD + "a,8000,8000,2,T4\n")
    (tmp_path / "p.csv").write_text(PODS_HEAD + "x,1000,10,1,600,\ny,1000,10,1,600,\n")
    nodes, pods = load_nodes(tmp_path / "n.csv"), load_pods(tmp_path / "p.csv")
    engine = build(nodes)
    first = run_fill_engine(nodes, pods, 7, engine)
    again = run_fill_engine(nodes, pods, 7, engine)
    assert first == again and set(first.ratio_at) == {90, 95, 100, 130}
    # two 600s fit one per GPU: at most 1,200 of 2,000 milli, whatever arrives
    assert first.ratio_at[130] == pytest.approx(60.0)


def test_a_model_the_engine_cannot_name_is_refused_with_the_fix(tmp_path: Path) -> None:
    from gpucarve.core.problems import InvalidInput

    (tmp_path / "n.csv").write_text(NODES_HEAD + "a,8000,8000,2,H100X\n")
    with pytest.raises(InvalidInput) as exc:
        build(load_nodes(tmp_path / "n.csv"))
    (problem,) = exc.value.problems
    assert "H100X" in problem.message and "gpucarve-array" in problem.fix
