"""Options and loaders shared by the commands; each turns bad input into exit code 2."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.text import Text

from gpucarve.cli.output import Exit, console, print_problems, refuse
from gpucarve.config.catalog_file import load_catalog
from gpucarve.config.examples import POLICY, example_path
from gpucarve.config.policy_build import LoadedPolicy, load_policy
from gpucarve.core.catalog import AmbiguousModel, Catalog, GpuModel, UnknownModel
from gpucarve.core.problems import InvalidInput

CatalogOption = Annotated[
    list[Path] | None,
    typer.Option(
        "--catalog",
        help="Extra GPU catalog file (kind: GpuCatalog) adding or overriding models; repeatable.",
    ),
]


def fail(exc: InvalidInput) -> NoReturn:
    print_problems(exc.source, exc.problems, console(stderr=True))
    raise typer.Exit(Exit.INVALID)


def catalog_or_exit(files: list[Path] | None) -> Catalog:
    try:
        return load_catalog(files or [])
    except InvalidInput as exc:
        fail(exc)


def model_or_exit(catalog: Catalog, name: str) -> GpuModel:
    err = console(stderr=True)
    try:
        return catalog.lookup(name)
    except AmbiguousModel as exc:
        err.print(Text(f"GPU model {name!r} could mean {', '.join(exc.candidates)}", style="red"))
        err.print(Text("fix: name one of them exactly"))
    except UnknownModel as exc:
        err.print(Text(f"unknown GPU model {name!r}", style="red"))
        hint = f"did you mean {' or '.join(exc.suggestions)}? " if exc.suggestions else ""
        err.print(Text(f"fix: {hint}`gpucarve catalog list` shows every model"))
    raise typer.Exit(Exit.INVALID)


OptionalPolicyFile = Annotated[
    Path | None,
    typer.Argument(
        help="Policy YAML file (default: the built-in three-team example).", show_default=False
    ),
]


# The same file as an option, as `simulate` and the Kubernetes commands take it.
PolicyOption = Annotated[
    Path | None,
    typer.Option(
        "--policy",
        help="Policy YAML file, as simulate takes it (the same as the FILE argument).",
        show_default=False,
    ),
]


def one_policy(positional: Path | None, option: Path | None) -> Path | None:
    """The policy given as the argument or as --policy; both, differing, is a usage error."""
    if positional is not None and option is not None and positional != option:
        console(stderr=True).print(
            Text(
                f"error: policy given twice ({positional} and --policy {option}) "
                "[two-policies]; fix: give it once, as FILE or as --policy",
                style="red",
            )
        )
        raise typer.Exit(2)
    return option if option is not None else positional


def policy_file(path: Path | None) -> Path:
    """The user's policy, or the built-in example (said on stderr, so output stays clean)."""
    if path is not None:
        return path
    console(stderr=True).print(
        Text(
            "using the built-in example policy; `gpucarve init` writes it out to edit", style="dim"
        )
    )
    return example_path(POLICY)


def policy_or_exit(path: Path, catalog: list[Path] | None) -> LoadedPolicy:
    try:
        return load_policy(path, catalog or [])
    except InvalidInput as exc:
        fail(exc)


def out_dir_or_exit(path: Path, option: str) -> Path:
    """Make sure `path` is a folder gpucarve can write into, before any work is done (a
    simulation must not run for minutes and then fail to save its results)."""
    err = console(stderr=True)
    problem = ""
    if path.exists() and not path.is_dir():
        problem = "is a file, not a folder"
    else:
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            problem = f"cannot be created: {exc.strerror or exc}"
        else:
            if not os.access(path, os.W_OK | os.X_OK):
                problem = "is not writable"
    if problem:
        err.print(Text(f"{option} {path}: {problem}", style="red"))
        err.print(Text(f"fix: pass a folder you can write to with {option}"))
        raise typer.Exit(Exit.INVALID)
    return path


def text_out(out: Path | None, text: str) -> bool:
    """`text` on standard output (`out` None) or into `out`; a file that cannot be written
    exits naming --out and the fix. Whether it went to a file."""
    if out is None:
        typer.echo(text, nl=False)
        return False
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        refuse("--out", "cannot-write", f"{out}: {exc.strerror}",
               "give a file in a folder you may write")  # fmt: skip
    return True
