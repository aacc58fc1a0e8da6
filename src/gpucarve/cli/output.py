"""Shared output helpers: consoles, problem reports, exit codes."""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Sequence
from enum import IntEnum
from typing import NoReturn, TextIO

import typer
from rich.console import Console
from rich.text import Text

from gpucarve.core.problems import Problem, Severity


class Exit(IntEnum):
    OK = 0
    NO = 1  # a question answered "no" (e.g. `mig check` of a layout that does not fit)
    INVALID = 2  # bad input: the file, model or arguments
    BUG = 3  # gpucarve itself failed: an internal error, reported as a bug


PIPE_WIDTH = 120


def width_for(stream: TextIO) -> int:
    """COLUMNS when set; a terminal's own width; else (a pipe, a CI log) wide enough that
    tables and messages do not wrap mid-word."""
    columns = int(os.environ.get("COLUMNS", "0") or 0)
    if columns:
        return columns
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):  # a stream replaced or closed
        tty = False
    return shutil.get_terminal_size((PIPE_WIDTH, 24)).columns if tty else PIPE_WIDTH


def console(stderr: bool = False) -> Console:
    # Errors (stderr) are never wrapped: one problem stays one line for grep and log search.
    width = width_for(sys.stderr if stderr else sys.stdout)
    return Console(stderr=stderr, width=width, highlight=False, soft_wrap=stderr)


def problem_dict(p: Problem) -> dict[str, object]:
    return {
        "severity": str(p.severity),
        "path": p.location,
        "line": p.line,
        "code": p.code,
        "message": p.message,
        "fix": p.fix,
    }


def print_problems(source: str, problems: Sequence[Problem], out: Console) -> None:
    errs = [p for p in problems if p.severity is Severity.ERROR]
    warns = [p for p in problems if p.severity is Severity.WARNING]
    counts = []
    if errs:
        counts.append(f"{len(errs)} error{'s' if len(errs) != 1 else ''}")
    if warns:
        counts.append(f"{len(warns)} warning{'s' if len(warns) != 1 else ''}")
    out.print(Text(f"{source}: {', '.join(counts)}", style="bold"))
    for p in [*errs, *warns]:
        head = Text()
        style = "bold red" if p.severity is Severity.ERROR else "bold yellow"
        head.append(f"{p.severity}: ", style=style)
        where = p.location
        if p.line is not None and where == "(document)":
            where = f"line {p.line}"
        head.append(where, style="bold")
        if p.line is not None and not where.startswith(f"line {p.line}"):
            head.append(f" (line {p.line})")
        head.append(f" [{p.code}]", style="dim")
        out.print(head)
        out.print(Text("  " + p.message))
        out.print(Text("  fix: " + p.fix, style="green"))


def print_problems_json(source: str, problems: Sequence[Problem], out: Console) -> None:
    doc = {"source": source, "problems": [problem_dict(p) for p in problems]}
    out.print_json(json.dumps(doc), highlight=False)


def refuse(where: str, code: str, message: str, fix: str) -> NoReturn:
    """A bad argument, said as every problem is: where, the stable code, what, and the fix;
    exit 2."""
    err = console(stderr=True)
    err.print(Text(f"error: {where} [{code}]", style="red"))
    err.print(Text(f"  {message}"))
    err.print(Text(f"  fix: {fix}"))
    raise typer.Exit(Exit.INVALID)
