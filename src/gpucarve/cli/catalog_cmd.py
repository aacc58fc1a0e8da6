"""`gpucarve catalog`: the GPU models gpucarve knows."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from gpucarve.cli.common import CatalogOption, catalog_or_exit, model_or_exit
from gpucarve.cli.output import console

app = typer.Typer(rich_markup_mode=None, help="The GPU catalog.", no_args_is_help=True)


@app.command("list")
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


@app.command("show")
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
