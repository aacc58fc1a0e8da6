"""`gpucarve mig ...`: MIG layouts of a GPU model, and whether a set of profiles fits."""

from __future__ import annotations

import difflib
import re
from collections import Counter
from pathlib import Path
from typing import Annotated, NoReturn

import typer
import yaml
from rich.table import Table
from rich.text import Text

from gpucarve.cli.common import CatalogOption, catalog_or_exit, fail, model_or_exit
from gpucarve.cli.output import Exit, console, refuse
from gpucarve.config.migparted_import import import_mig_config, import_mig_configs
from gpucarve.core import mig
from gpucarve.core.catalog import Catalog, GpuModel
from gpucarve.core.problems import InvalidInput

app = typer.Typer(
    rich_markup_mode=None,
    help="MIG geometry: valid layouts of a GPU model, and checks.",
    no_args_is_help=True,
)

_COUNTED = re.compile(r"^(\d+)\s*[x×*]\s*(\S+)$")


@app.command("layouts")
def layouts(
    model: Annotated[str, typer.Argument(help="GPU model: id, alias or GFD product label.")],
    media: Annotated[
        bool, typer.Option("--media", help="Include +me (media extension) profiles.")
    ] = False,
    count: Annotated[
        bool, typer.Option("--count", help="Print only the number of layouts.")
    ] = False,
    maximal: Annotated[
        bool,
        typer.Option("--maximal", help="Only layouts to which no further instance can be added."),
    ] = False,
    catalog: CatalogOption = None,
) -> None:
    """List every valid MIG layout (distinct multiset of profiles) of MODEL."""
    gpu = model_or_exit(catalog_or_exit(catalog), model)
    geom = gpu.mig
    if geom is None:
        _no_mig(gpu.id, catalog)
    try:
        keys = mig.maximal_layouts(geom, media) if maximal else mig.enumerate_layouts(geom, media)
    except mig.LayoutSearchTooLarge as exc:
        console(stderr=True).print(Text(f"{gpu.id}: {exc}", style="red"))
        console(stderr=True).print(Text("fix: check single layouts with `gpucarve mig check`"))
        raise typer.Exit(Exit.INVALID) from None
    out = console()
    if count:
        out.print(len(keys))
        return
    table = Table(title=f"{gpu.id}: {len(keys)} {'maximal ' if maximal else ''}MIG layouts")
    table.add_column("#", justify="right")
    table.add_column("layout")
    table.add_column("compute", justify="right")
    table.add_column("memory slices", justify="right")
    table.add_column("placement")
    for i, key in enumerate(keys, 1):
        counts = dict(key)
        placed = mig.place(geom, counts)
        assert placed.instances is not None, key
        comp = sum(mig.profile_of(geom, n).compute_slices * c for n, c in key)
        mem = sum(mig.profile_of(geom, n).memory_slices * c for n, c in key)
        table.add_row(
            str(i),
            mig.describe_layout(key),
            f"{comp}/{geom.compute_slices}",
            f"{mem}/{geom.memory_slices}",
            " ".join(inst.describe() for inst in placed.instances),
        )
    out.print(table)


def _parse_profiles(args: list[str]) -> Counter[str]:
    counts: Counter[str] = Counter()
    for a in args:
        m = _COUNTED.match(a)
        if m:
            counts[m.group(2)] += int(m.group(1))
        else:
            counts[a] += 1
    return counts


@app.command("check")
def check(
    model: Annotated[str, typer.Argument(help="GPU model: id, alias or GFD product label.")],
    profiles: Annotated[
        list[str],
        typer.Argument(
            help="Profiles to place on one GPU, e.g. 3g.40gb 3g.40gb 1g.10gb or 2x3g.40gb."
        ),
    ],
    catalog: CatalogOption = None,
) -> None:
    """Check whether PROFILES fit together on one GPU of MODEL: exit 0 with the placement, or
    exit 1 with the reason and the closest valid layouts."""
    gpu = model_or_exit(catalog_or_exit(catalog), model)
    err = console(stderr=True)
    if gpu.mig is None:
        _no_mig(gpu.id, catalog)
    geom = gpu.mig
    counts = _parse_profiles(profiles)
    zero = sorted(name for name, n in counts.items() if n < 1)
    if zero:
        err.print(Text(f"a count of 0 for {', '.join(zero)} places nothing", style="red"))
        err.print(Text("fix: give each profile at least once, e.g. 2x3g.40gb or 3g.40gb"))
        raise typer.Exit(Exit.INVALID)
    unknown = mig.unknown_profiles(geom, counts)
    if unknown:
        near = difflib.get_close_matches(unknown[0], geom.profile_names, n=1)
        hint = f"did you mean {near[0]}? " if near else ""
        refuse(f"profile {unknown[0]!a}", "unknown-profile",
               f"{gpu.id} has no MIG profile {', '.join(map(repr, unknown))}",
               f"{hint}{gpu.id} has {', '.join(geom.profile_names)}")  # fmt: skip
    result = mig.place(geom, counts)
    layout = mig.describe_layout(counts, geom)
    out = console()
    if result.instances is not None:
        out.print(Text(f"valid: {layout} fits on one {gpu.id}", style="green"))
        for inst in result.instances:
            p = geom.profile(inst.profile)
            assert p is not None
            span = (
                f"{inst.start}"
                if p.memory_slices == 1
                else f"{inst.start}-{inst.start + p.memory_slices - 1}"
            )
            out.print(Text(f"  {inst.profile} at start {inst.start} (memory slices {span})"))
        return
    out.print(Text(f"invalid: {layout} does not fit on one {gpu.id}", style="red"))
    for reason in result.reasons:
        out.print(Text(f"  - {reason}"))
    try:
        closest = mig.closest_layouts(geom, counts)
    except mig.LayoutSearchTooLarge:
        closest = ()  # a catalog geometry too large to search for neighbours
    if closest:
        out.print(Text("closest valid layouts:"))
    for key in closest:
        out.print(Text(f"  {mig.describe_layout(key)}"))
    raise typer.Exit(Exit.NO)


@app.command("import")
def import_config(
    file: Annotated[
        Path,
        typer.Argument(
            help="A mig-parted configuration (version: v1), the ConfigMap holding it, or "
            "several as --- documents or a kubectl List."
        ),
    ],
    config: Annotated[
        str | None,
        typer.Option("--config", help="Only this one of its mig-configs (default: every one)."),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option("--model", help="GPU model for entries without a device-filter."),
    ] = None,
    catalog: CatalogOption = None,
) -> None:
    """Read a mig-parted configuration into the `mig:` block of a policy pool, per GPU model
    (every layout checked against the model's MIG geometry)."""
    cat = catalog_or_exit(catalog)
    gpu = model_or_exit(cat, model) if model is not None else None
    if config is None:
        _import_all(file, cat, gpu)
        return
    try:
        blocks = import_mig_config(file, cat, config, gpu)
    except InvalidInput as exc:
        fail(exc)
    for model_id, block in sorted(blocks.items()):
        typer.echo(f"# pools of {model_id}:")
        typer.echo(yaml.safe_dump({"sharing": "mig", "mig": block}, sort_keys=False), nl=False)


def _import_all(file: Path, cat: Catalog, gpu: GpuModel | None) -> None:
    try:
        found = import_mig_configs(file, cat, gpu)
    except InvalidInput as exc:
        fail(exc)
    err = console(stderr=True)
    for note in found.notes:
        err.print(Text(f"{file}: {note}", style="yellow"))
    for name, blocks in sorted(found.configs.items()):
        whole = found.whole.get(name)
        if whole:
            # a pool is MIG or not: GPUs without MIG go to a pool of their own
            typer.echo(
                f"# configuration {name}: {', '.join(whole)} without MIG (mig-enabled: "
                "false): whole GPUs, a `sharing: exclusive` pool of their own"
            )
        for model_id, block in sorted(blocks.items()):
            # one YAML document per pool block: the output reads back as a stream
            typer.echo(f"--- # configuration {name}: pools of {model_id}")
            typer.echo(yaml.safe_dump({"sharing": "mig", "mig": block}, sort_keys=False), nl=False)
    err.print(Text(f"{len(found.configs)} configurations read from {file}", style="green"))


def _no_mig(model: str, catalog: list[Path] | None) -> NoReturn:
    models = [m.id for m in catalog_or_exit(catalog).models if m.mig_capable]
    refuse(f"model {model}", "mig-unsupported", f"{model} does not support MIG",
           f"use a MIG-capable model: {', '.join(models)}")  # fmt: skip
