"""How much would knowing the future help gpucarve's placement in the fill experiment?

gpucarve's fragmentation model weighs request shapes by the demand seen so far (the pods placed
and the one arriving). This benchmark runs the same model (the array reference, which places as
the engine does) with an oracle's demand instead: exactly the pods still to arrive up to the
100 % mark. If the oracle gains little, the distance left to the offline bound is not a matter of
guessing the mix better; `gpucarve bench fill --bound` shows what it is made of.

    python bench/fill_oracle.py --nodes $T/openb_node_list_gpu_node.csv \\
        --pods $T/openb_pod_list_gpushare40.csv --seeds 43-45

Prints the allocation ratio at 100 % arrived per seed, both ways, and the means.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from figures import print_figures

from gpucarve.cli.output import console, print_problems
from gpucarve.core.problems import InvalidInput
from gpucarve.engine.placement.frag_place import near_best
from gpucarve.sim.fill.bound import arrived_at
from gpucarve.sim.fill.experiment import REFERENCE, FillCluster, Fragmentation, run_fill
from gpucarve.sim.fill.trace import Nodes, Pods, arrival_order, load_nodes, load_pods

MAX_SEEDS = 100


def oracle_fill(nodes: Nodes, pods: Pods, seed: int) -> float:
    """The allocation ratio at 100 % arrived with the model's demand set to the pods still to
    come (each leaves the demand once placed or dropped)."""
    cluster = FillCluster(nodes)
    score = Fragmentation(cluster, pods)
    order = arrival_order(pods, nodes.gpu_capacity, seed)
    arrived = arrived_at(pods, order, nodes.gpu_capacity, 100)
    for i in arrived:
        score.observe(i)
    given = 0
    for i in arrived:
        cand = np.flatnonzero(cluster.feasible(pods, i))
        if len(cand):
            s = score(cluster, pods, i, cand)
            pick = int(np.flatnonzero(near_best(s))[0])
            gpu = int(score.gpu_choice[pick]) if score.gpu_choice is not None else None
            cluster.place(pods, i, int(cand[pick]), None, gpu)
            given += int(pods.num_gpu[i]) * int(pods.gpu_milli[i])
        score.forget(i)
    return 100 * given / nodes.gpu_capacity


def _seeds(text: str) -> list[int]:
    lo, _, hi = text.partition("-")
    try:
        seeds = list(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        raise SystemExit(f"fill_oracle.py: --seeds must be N or N-M, got {text!r}") from None
    if not seeds or len(seeds) > MAX_SEEDS:
        raise SystemExit(f"fill_oracle.py: --seeds must name 1 to {MAX_SEEDS} seeds, got {text!r}")
    return seeds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", required=True, type=Path, help="openb_node_list_gpu_node.csv")
    ap.add_argument("--pods", required=True, type=Path, help="an openb_pod_list_*.csv")
    ap.add_argument("--seeds", default="43-45", help="N or N-M (default 43-45)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    seeds = _seeds(args.seeds)
    try:
        nodes, pods = load_nodes(args.nodes), load_pods(args.pods)
    except InvalidInput as exc:
        # each problem with its file, line and fix, as `gpucarve bench fill` says it
        print_problems(exc.source, exc.problems, console(stderr=True))
        raise SystemExit(2) from None
    seen, oracle = [], []
    figures: dict[str, object] = {}
    for s in seeds:
        seen.append(run_fill(nodes, pods, REFERENCE, s).ratio_at[100])
        oracle.append(oracle_fill(nodes, pods, s))
        figures[f"seed {s} (demand seen so far / oracle)"] = f"{seen[-1]:.3f} / {oracle[-1]:.3f}"
    figures["mean, demand seen so far (%)"] = round(statistics.fmean(seen), 3)
    figures["mean, oracle demand (%)"] = round(statistics.fmean(oracle), 3)
    figures["oracle gain (points)"] = round(statistics.fmean(oracle) - statistics.fmean(seen), 3)
    print_figures(figures, args.json)


if __name__ == "__main__":
    main()
