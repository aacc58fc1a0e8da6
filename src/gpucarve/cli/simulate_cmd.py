"""`gpucarve simulate`: replay a seeded synthetic trace through the engine and report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, Progress, TextColumn
from rich.table import Table

from gpucarve.cli.common import CatalogOption, fail, policy_or_exit
from gpucarve.cli.output import console
from gpucarve.core.problems import InvalidInput
from gpucarve.sim.metrics import summarize
from gpucarve.sim.runner import Simulator
from gpucarve.sim.synthetic import generate, three_teams

DEFAULT_POLICY = Path("examples/three-teams.yaml")


def _hours(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _tables(summary: dict[str, Any]) -> list[Table]:
    overall = Table(title="Cluster")
    overall.add_column("metric")
    overall.add_column("gpucarve", justify="right")
    rows = [
        (
            "workloads (completed / never started)",
            f"{summary['workloads']} ({summary['completed']} / {summary['never_started']})",
        ),
        ("GPU allocation (time-weighted)", f"{summary['allocation']:.1%}"),
        ("SM-weighted utilisation", f"{summary['sm_utilisation']:.1%}"),
        (
            "wait p50 / p95 / max",
            " / ".join(_hours(summary[k]) for k in ("wait_p50_s", "wait_p95_s", "wait_max_s")),
        ),
        (
            "dev time to first GPU p50 / p95",
            " / ".join(
                _hours(summary[k])
                for k in ("dev_time_to_first_gpu_p50_s", "dev_time_to_first_gpu_p95_s")
            ),
        ),
        (
            "gang first-try success",
            f"{summary['gang_first_try_success']:.1%} of {summary['gangs']}",
        ),
        (
            "preemptions (GPU-hours lost)",
            f"{summary['preemptions']} ({summary['gpu_hours_lost_to_preemption']})",
        ),
    ]
    for name, value in rows:
        overall.add_row(name, value)
    pools = Table(title="Pools")
    for col in ("pool", "GPUs", "allocation", "SM utilisation"):
        pools.add_column(col, justify="left" if col == "pool" else "right")
    for name, p in summary["pools"].items():
        pools.add_row(
            name, f"{p['gpus']:g}", f"{p['allocation']:.1%}", f"{p['sm_utilisation']:.1%}"
        )
    teams = Table(title="Teams")
    for col in (
        "queue",
        "workloads",
        "wait p50",
        "wait p95",
        "GPU-hours",
        "cost (USD)",
        "quota use",
    ):
        teams.add_column(col, justify="left" if col in ("queue", "quota use") else "right")
    for name, t in summary["teams"].items():
        teams.add_row(
            name,
            str(t["workloads"]),
            _hours(t["wait_p50_s"]),
            _hours(t["wait_p95_s"]),
            f"{t['gpu_hours']:,.1f}",
            f"{t['cost_usd']:,.0f}",
            ", ".join(f"{f} {u:.0%}" for f, u in t["quota_use"].items()),
        )
    return [overall, pools, teams]


def simulate(
    policy: Annotated[Path, typer.Option("--policy", help="Policy YAML file.")] = DEFAULT_POLICY,
    seed: Annotated[int, typer.Option(help="Seed of the synthetic trace.")] = 42,
    days: Annotated[
        float, typer.Option(help="Days of arrivals to generate.", min=0.01, max=60)
    ] = 2.0,
    out: Annotated[Path | None, typer.Option("--out", help="Write results.json here.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the results as JSON.")] = False,
    catalog: CatalogOption = None,
) -> None:
    """Simulate the three-team synthetic workload on POLICY with the gpucarve engine and report
    allocation, waits, gang success, preemptions and cost per team.

    (Comparison with kube-default and static-quota baselines, trace importers and the HTML
    report are tracked in the simulator issue.)
    """
    loaded = policy_or_exit(policy, catalog)
    try:
        trace = generate(loaded.policy, three_teams(days), seed)
    except InvalidInput as exc:
        fail(exc)
    sim = Simulator(loaded.policy, trace.workloads, trace.utilisation)
    err = console(stderr=True)
    with Progress(
        TextColumn("simulating"),
        BarColumn(),
        TextColumn("{task.description}"),
        console=err,
        transient=True,
    ) as bar:
        task = bar.add_task("", total=len(trace.workloads))

        def tick(now: int, done: int) -> None:
            bar.update(task, completed=done, description=f"t={now / 3600:.1f} h, {done} done")

        result = sim.run(progress=tick)
    summary = summarize(result, trace.utilisation)
    doc = {"policy": loaded.policy.name, "seed": seed, "days": days, "gpucarve": summary}
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    if as_json:
        typer.echo(json.dumps(doc, indent=2, sort_keys=True))
        return
    c = console()
    for table in _tables(summary):
        c.print(table)
