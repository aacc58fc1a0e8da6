"""The `gpucarve` command."""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text
from typer.exceptions import Abort, TyperException

from gpucarve import __version__
from gpucarve.cli import (
    adopt_cmd,
    agent_cmd,
    apply_cmd,
    bench_cmd,
    devcluster_cmd,
    explain_cmd,
    import_cmd,
    init_cmd,
    mig_cmd,
    plan_cmd,
    policy_cmd,
    render_cmd,
    scheduler_cmd,
    simulate_cmd,
    usage,
    webhook_cmd,
)
from gpucarve.cli.common import CatalogOption, catalog_or_exit, model_or_exit
from gpucarve.cli.output import Exit, console

app = typer.Typer(
    rich_markup_mode=None,
    name="gpucarve",
    help="Share a Kubernetes cluster's GPUs fully and fairly.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.command("init")(init_cmd.init)
app.command("validate")(policy_cmd.validate)
app.command("plan")(plan_cmd.plan)
app.command("simulate")(simulate_cmd.simulate)
app.command("apply")(apply_cmd.apply)
app.command("queues")(apply_cmd.queues)
app.command("scheduler")(scheduler_cmd.scheduler)
app.command("explain")(explain_cmd.explain)
app.command("adopt")(adopt_cmd.adopt)
app.command("node-agent")(agent_cmd.node_agent)
app.add_typer(policy_cmd.policy_app, name="policy")
app.add_typer(policy_cmd.cluster_app, name="cluster")
app.add_typer(mig_cmd.app, name="mig")
app.add_typer(bench_cmd.app, name="bench")
app.add_typer(import_cmd.app, name="import")
app.add_typer(devcluster_cmd.app, name="dev-cluster")
app.add_typer(render_cmd.app, name="render")
app.add_typer(webhook_cmd.app, name="webhook")

catalog_app = typer.Typer(rich_markup_mode=None, help="The GPU catalog.", no_args_is_help=True)
app.add_typer(catalog_app, name="catalog")


@catalog_app.command("list")
def catalog_list(catalog: CatalogOption = None) -> None:
    """List the GPU models gpucarve knows."""
    cat = catalog_or_exit(catalog)
    table = Table(title=f"GPU catalog: {len(cat.models)} models")
    for col in (
        "model",
        "arch",
        "memory",
        "SMs",
        "MIG",
        "NVLink",
        "$/GPU-h",
        "GFD product",
        "flavor prefix",
    ):
        table.add_column(col)
    for m in cat.models:
        table.add_row(
            m.id,
            m.architecture,
            f"{m.memory_mib:,} MiB" + ("*" if m.memory_estimated else ""),
            str(m.sm_count),
            f"{len(m.mig.profiles)} profiles" if m.mig else "-",
            "yes" if m.nvlink else "-",
            "n/a" if m.price_per_gpu_hour is None else f"{m.price_per_gpu_hour:.2f}",
            ", ".join(m.gfd_products),
            m.flavor_prefix,
        )
    out = console()
    out.print(table)
    out.print(Text("* estimated from the nominal size; prices are indicative on-demand USD"))


@catalog_app.command("show")
def catalog_show(
    model: Annotated[str, typer.Argument(help="GPU model: id, alias or GFD product label.")],
    catalog: CatalogOption = None,
) -> None:
    """Show one model with its MIG profiles."""
    m = model_or_exit(catalog_or_exit(catalog), model)
    out = console()
    out.print(
        Text(f"{m.id} ({m.architecture}, compute capability {m.compute_capability})", style="bold")
    )
    out.print(
        Text(f"memory {m.memory_mib:,} MiB, {m.sm_count} SMs, NVLink {'yes' if m.nvlink else 'no'}")
    )
    out.print(
        Text(
            f"aliases: {', '.join(m.aliases) or '-'}; "
            f"GFD products: {', '.join(m.gfd_products) or '-'}"
        )
    )
    price = "n/a" if m.price_per_gpu_hour is None else f"${m.price_per_gpu_hour:.2f}/GPU-hour"
    out.print(Text(f"price: {price} {m.price_note}".rstrip()))
    if m.source:
        out.print(Text(f"sources: {m.source}"))
    if m.mig is None:
        out.print(Text("MIG: not supported"))
        return
    g = m.mig
    table = Table(
        title=f"MIG profiles ({g.compute_slices} compute slices, {g.memory_slices} memory slices)"
    )
    for col in (
        "profile",
        "id",
        "compute",
        "memory slices",
        "memory",
        "SMs",
        "max",
        "starts",
        "verified",
    ):
        table.add_column(col)
    for p in g.profiles:
        table.add_row(
            p.name,
            "-" if p.profile_id is None else str(p.profile_id),
            str(p.compute_slices),
            str(p.memory_slices),
            f"{p.memory_mib:,} MiB" + ("*" if p.memory_estimated else ""),
            "-" if p.sm_count is None else str(p.sm_count),
            str(p.max_instances),
            ",".join(map(str, p.starts)),
            "yes" if p.placements_verified else "inferred",
        )
    out.print(table)


@app.callback(invoke_without_command=True)
def _root(
    version: Annotated[bool, typer.Option("--version", help="Print the version and exit.")] = False,
) -> None:
    if version:
        typer.echo(f"gpucarve {__version__}")
        raise typer.Exit(0)


BUG_REPORT = (
    "this is a bug in gpucarve, not in your input: please report it with the command line and "
    "the files it read (GPUCARVE_DEBUG=1 prints the traceback)"
)


def run() -> None:
    """The console script: bad input exits 2 with its problems (the commands do that); anything
    else that escapes is gpucarve's own failure, one line and exit 3, never a traceback."""
    try:
        rv = app(standalone_mode=False)
    except TyperException as exc:  # the parser's: an unknown option, a value of the wrong type
        sys.exit(usage.report(exc))
    except Abort:
        print("gpucarve: aborted", file=sys.stderr)
        sys.exit(1)
    except Exception as exc:
        if os.environ.get("GPUCARVE_DEBUG"):
            raise
        what = f"{type(exc).__name__}: {exc}"
        if len(what) > 300:
            what = what[:297] + "..."
        print(f"gpucarve: internal error ({what}); {BUG_REPORT}", file=sys.stderr)
        sys.exit(Exit.BUG)
    sys.exit(rv if isinstance(rv, int) else 0)
