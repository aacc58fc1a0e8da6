"""`gpucarve bench fill`: the published fill experiment on the Alibaba GPU-sharing trace."""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from gpucarve.cli.common import fail
from gpucarve.cli.output import console, refuse
from gpucarve.core.problems import InvalidInput
from gpucarve.core.quantity import QuantityError, whole_number
from gpucarve.sim.fill import engine as fill_engine
from gpucarve.sim.fill.bound import Bound
from gpucarve.sim.fill.bound_rule import bounds_at
from gpucarve.sim.fill.experiment import POLICIES, REFERENCE, run_fill
from gpucarve.sim.fill.marks import MARKS, FillRun
from gpucarve.sim.fill.trace import load_nodes, load_pods

app = typer.Typer(
    rich_markup_mode=None,
    help="Benchmarks that reproduce published experiments.",
    no_args_is_help=True,
)

ALL = [*POLICIES, "gpucarve"]
# gpucarve's model on the experiment's own arrays: the engine path's fast reference
KNOWN = [*ALL, REFERENCE]


MAX_SEEDS = 1_000  # each seed is a whole run; more says nothing the std of 1,000 does not


def _seeds(text: str) -> list[int]:
    """`42-51` or `1,2,5`; ValueError names the part that is wrong."""
    seeds: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        try:
            a = whole_number(lo, "a seed", 2**32 - 1)
            b = whole_number(hi, "a seed", 2**32 - 1) if hi else a
        except QuantityError:
            raise ValueError(f"{part.strip()!r} is not a seed or range like 42-51") from None
        if b < a:
            raise ValueError(f"{part.strip()!r} runs backwards; write the lower seed first")
        if len(seeds) + b - a + 1 > MAX_SEEDS:
            raise ValueError(f"more than {MAX_SEEDS:,} seeds; each seed is a whole run")
        seeds.extend(range(a, b + 1))
    return seeds


def _summary(runs: list[dict[int, float]]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for mark in MARKS:
        values = [r[mark] for r in runs]
        out[str(mark)] = {
            "mean": round(statistics.fmean(values), 2),
            "std": round(statistics.pstdev(values), 2),
        }
    return out


@app.command("fill")
def fill(
    nodes: Annotated[
        Path, typer.Option("--nodes", help="Node list CSV (sn,cpu_milli,memory_mib,gpu,model).")
    ],
    pods: Annotated[
        Path,
        typer.Option(
            "--pods", help="Pod list CSV (name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec])."
        ),
    ],
    policy: Annotated[
        list[str] | None,
        typer.Option(
            "--policy",
            help=f"Repeatable; default all: {', '.join(ALL)}. gpucarve places through the "
            f"engine; {REFERENCE} is the same model on the experiment's arrays (a reference).",
        ),
    ] = None,
    seeds: Annotated[str, typer.Option("--seeds", help="Seeds, e.g. 42-51 or 1,2,5.")] = "42-51",
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    bound: Annotated[
        bool,
        typer.Option(
            "--bound",
            help="Also compute upper bounds on the ratio for the arrived pods (LPs solved with "
            "HiGHS, up to 15 s per seed): one for the experiment's rule that a pod that "
            "fits is placed, which each policy is shown as a share of, and one where any pod may "
            "be left out; and which pods each leaves out at 100 % arrived.",
        ),
    ] = False,
) -> None:
    """Fill the cluster with the trace's pods (shuffled per seed, inflated to 1.3 x capacity,
    no departures, no retries) and print the GPU allocation ratio at 90/95/100/130 % arrived
    demand: mean and std over the seeds, per policy."""
    err = console(stderr=True)
    names = policy or ALL
    unknown = [n for n in names if n not in KNOWN]
    try:
        seed_list = _seeds(seeds)
    except ValueError as exc:
        refuse("--seeds", "bad-seeds", str(exc), "write seeds and ranges, e.g. 42-51 or 1,7,9")
    if unknown:
        refuse("--policy", "unknown-policy", f"no policy {', '.join(unknown)}",
               f"use one of {', '.join(KNOWN)}")  # fmt: skip
    try:
        cluster, trace = load_nodes(nodes), load_pods(pods)
    except InvalidInput as exc:
        fail(exc)
    seconds: dict[str, list[float]] = {}
    out: dict[str, dict[str, dict[str, float]]] = {}
    per_seed: dict[str, list[dict[int, float]]] = {}
    all_runs: dict[str, list[FillRun]] = {}
    for name in names:
        runs = []
        try:
            engine = fill_engine.build(cluster) if name == "gpucarve" else None
        except InvalidInput as exc:
            fail(exc)
        for s in seed_list:
            started = time.perf_counter()
            if engine is not None:
                runs.append(fill_engine.run_fill_engine(cluster, trace, s, engine))
            else:
                runs.append(run_fill(cluster, trace, name, s))
            seconds.setdefault(name, []).append(time.perf_counter() - started)
        all_runs[name] = runs
        per_seed[name] = [r.ratio_at for r in runs]
        out[name] = _summary(per_seed[name])
    left: dict[str, dict[str, dict[str, float]]] = {}
    if bound:
        started = time.perf_counter()
        solved = [bounds_at(cluster, trace, s) for s in seed_list]
        seconds["bounds"] = [(time.perf_counter() - started) / len(seed_list)]
        bounds = [{m: both[1].ratio for m, both in at.items()} for at in solved]
        out["bound"] = _summary(bounds)
        out[FREE] = _summary([{m: both[0].ratio for m, both in at.items()} for at in solved])
        left = _left_out([at[100] for at in solved], all_runs, cluster.gpu_capacity)
        for name in names:
            shares = [
                {m: 100 * r[m] / b[m] if b[m] else 100.0 for m in MARKS}
                for r, b in zip(per_seed[name], bounds, strict=True)
            ]
            out[f"{name} / bound"] = _summary(shares)
    if as_json:
        report = {**out, **({LEFT_OUT: left} if bound else {})}
        typer.echo(json.dumps(report, sort_keys=False, allow_nan=False))
        return
    for name, spent in seconds.items():
        err.print(f"{name}: {statistics.fmean(spent):.1f} s per seed")
    table = Table(
        title=f"GPU allocation ratio (%) by arrived demand, mean ± std over {len(seed_list)} seeds"
    )
    table.add_column("policy")
    for mark in MARKS:
        table.add_column(f"{mark} %", justify="right")
    for name, row in out.items():
        table.add_row(
            name, *(f"{row[str(m)]['mean']:.2f} ± {row[str(m)]['std']:.2f}" for m in MARKS)
        )
    console().print(table)
    if bound:
        _print_left_out(left, len(seed_list))


LEFT_OUT = "left out at 100 %"
FREE = "bound, any pod may be left out"
SHOWN_SHARE = 0.01  # % of capacity: smaller shapes are left off the printed table (not the JSON)


def _left_out(
    bounds: list[tuple[Bound, Bound]], runs: dict[str, list[FillRun]], capacity: int
) -> dict[str, dict[str, dict[str, float]]]:
    """Per GPU shape, the pods each bound's optimum leaves out at 100 % arrived (the free one,
    the experiment's rule) and the pods each policy dropped by then: mean per seed, and their
    GPU milli as a % of capacity. What the free bound leaves out and the rule's does not is
    pods every policy of the experiment must place while a slot for them is free."""
    columns: dict[str, list[dict[tuple[int, int], float]]] = {
        FREE: [b[0].left_out for b in bounds],
        "bound": [b[1].left_out for b in bounds],
    }
    for name, rs in runs.items():
        columns[name] = [{k: float(v) for k, v in r.dropped_at[100].items()} for r in rs]
    shapes = sorted({k for per in columns.values() for seed in per for k in seed})
    out: dict[str, dict[str, dict[str, float]]] = {}
    for n, milli in shapes:
        row = {}
        for name, per in columns.items():
            pods = statistics.fmean(seed.get((n, milli), 0.0) for seed in per)
            row[name] = {"pods": pods, "share": 100 * pods * n * milli / capacity}
        out[f"{n}x{milli}"] = row
    return out


def _print_left_out(left: dict[str, dict[str, dict[str, float]]], seeds: int) -> None:
    if not left:
        return
    names = list(next(iter(left.values())))
    table = Table(
        title=f"GPU pods left out at 100 % arrived, mean per seed over {seeds} seeds: pods "
        "(their GPU, % of capacity); the bounds' are what their optimum does not place"
    )
    table.add_column("pod shape (GPUs x milli)")
    for name in names:
        table.add_column(name, justify="right")
    totals = {name: sum(row[name]["share"] for row in left.values()) for name in names}
    shown = sorted(left.items(), key=lambda kv: -max(c["share"] for c in kv[1].values()))
    for shape, row in shown:
        if max(c["share"] for c in row.values()) < SHOWN_SHARE:
            continue
        table.add_row(shape, *(f"{row[n]['pods']:.1f} ({row[n]['share']:.2f} %)" for n in names))
    table.add_row("all", *(f"({totals[n]:.2f} %)" for n in names))
    console().print(table)
