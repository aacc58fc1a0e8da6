"""`gpucarve init [DIR]`: write the built-in example out as a starting point to edit."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from gpucarve.cli.common import out_dir_or_exit
from gpucarve.cli.output import Exit, console
from gpucarve.config.examples import POLICY, WORKLOADS, example_text

FILES = {"policy.yaml": POLICY, "workloads.yaml": WORKLOADS}


def init(
    folder: Annotated[
        Path, typer.Argument(help="Folder to write policy.yaml and workloads.yaml into.")
    ] = Path("."),
    force: Annotated[bool, typer.Option("--force", help="Overwrite files already there.")] = False,
) -> None:
    """Write a starter policy (the three-team example, commented) and example workloads for
    `gpucarve plan`, to edit for your own cluster."""
    err = console(stderr=True)
    taken = [folder / name for name in FILES if (folder / name).exists()]
    if taken and not force:
        err.print(Text(f"{', '.join(map(str, taken))} already exist(s)", style="red"))
        err.print(Text("fix: pick another folder, or pass --force to overwrite"))
        raise typer.Exit(Exit.INVALID)
    out_dir_or_exit(folder, "DIR")
    for name, source in FILES.items():
        (folder / name).write_text(example_text(source), encoding="utf-8")
    policy, workloads = folder / "policy.yaml", folder / "workloads.yaml"
    out = console()
    out.print(f"wrote {policy} and {workloads}; next:")
    out.print(Text(f"  gpucarve validate {policy}", style="bold"))
    out.print(Text(f"  gpucarve plan {policy} {workloads}", style="bold"))
    out.print(Text(f"  gpucarve simulate --policy {policy}", style="bold"))
