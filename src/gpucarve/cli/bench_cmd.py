"""`gpucarve bench fill`: the published fill experiment on the Alibaba GPU-sharing trace."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from gpucarve.cli.common import fail
from gpucarve.cli.output import Exit, console
from gpucarve.core.problems import InvalidInput
from gpucarve.sim.fill import MARKS, POLICIES, load_nodes, load_pods, run_fill

app = typer.Typer(help="Benchmarks that reproduce published experiments.", no_args_is_help=True)

ALL = [*POLICIES, "gpucarve"]


def _seeds(text: str) -> list[int]:
    seeds: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        if not lo.strip().isdigit() or (hi and not hi.strip().isdigit()):
            raise ValueError(part)
        a, b = int(lo), int(hi or lo)
        if b < a:
            raise ValueError(part)
        seeds.extend(range(a, b + 1))
    return seeds


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
        typer.Option("--policy", help=f"Repeatable; default all: {', '.join(ALL)}."),
    ] = None,
    seeds: Annotated[str, typer.Option("--seeds", help="Seeds, e.g. 42-51 or 1,2,5.")] = "42-51",
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Fill the cluster with the trace's pods (shuffled per seed, inflated to 1.3 x capacity,
    no departures, no retries) and print the GPU allocation ratio at 90/95/100/130 % arrived
    demand: mean and std over the seeds, per policy."""
    err = console(stderr=True)
    names = policy or ALL
    unknown = [n for n in names if n not in ALL]
    try:
        seed_list = _seeds(seeds)
    except ValueError as exc:
        err.print(Text(f"--seeds: {exc.args[0]!r} is not a seed or range like 42-51", style="red"))
        raise typer.Exit(Exit.INVALID) from None
    if unknown:
        err.print(Text(f"unknown policy {', '.join(unknown)}; use {', '.join(ALL)}", style="red"))
        raise typer.Exit(Exit.INVALID)
    try:
        cluster, trace = load_nodes(nodes), load_pods(pods)
    except InvalidInput as exc:
        fail(exc)
    out: dict[str, dict[str, dict[str, float]]] = {}
    for name in names:
        runs = [run_fill(cluster, trace, name, s) for s in seed_list]
        out[name] = {}
        for mark in MARKS:
            values = [r.ratio_at[mark] for r in runs]
            out[name][str(mark)] = {
                "mean": round(statistics.fmean(values), 2),
                "std": round(statistics.pstdev(values), 2),
            }
    if as_json:
        typer.echo(json.dumps(out, sort_keys=False))
        return
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
