"""Command-line usage errors (an unknown option or command, a value of the wrong type, a missing
argument) in gpucarve's own form: where, a code, the problem and the fix, exit 2, as every other
bad input is reported; not the parser's box without a fix."""

from __future__ import annotations

import difflib
import re
import sys
from typing import Any

from typer.exceptions import TyperException

from gpucarve.cli.output import Exit


def _kebab(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "-", name).lower()


def _field(exc: TyperException) -> str:
    """The option, argument or command the error is about."""
    option = getattr(exc, "option_name", None)
    if option:
        return str(option)
    param: Any = getattr(exc, "param", None)
    if param is not None:
        opts = [o for o in getattr(param, "opts", []) if o.startswith("--")]
        return opts[0] if opts else str(getattr(param, "name", "") or "argument").upper()
    hint = getattr(exc, "param_hint", None)
    if hint:
        return str(hint)
    named = re.match(r"No such command '([^']+)'", exc.format_message())
    return named.group(1) if named else "command line"


def _known(exc: TyperException) -> list[str]:
    """The options and subcommands the command in error takes."""
    ctx: Any = getattr(exc, "ctx", None)
    cmd = getattr(ctx, "command", None)
    if cmd is None:
        return []
    names = [o for p in getattr(cmd, "params", []) for o in getattr(p, "opts", [])]
    if hasattr(cmd, "list_commands"):
        names += cmd.list_commands(ctx)
    return names


def _did_you_mean(exc: TyperException, field: str) -> list[str]:
    """What the user may have meant by an unknown option or command: its closest names."""
    if type(exc).__name__ not in ("NoSuchOption", "UsageError") or field == "command line":
        return []
    return difflib.get_close_matches(field, _known(exc), n=2, cutoff=0.6)


def _fix(exc: TyperException, command: str) -> str:
    possibilities = getattr(exc, "possibilities", None)
    if possibilities:
        return f"use {' or '.join(sorted(possibilities))}; `{command} --help` lists every option"
    message = exc.format_message()
    close = _did_you_mean(exc, _field(exc))
    if close:
        return f"did you mean {' or '.join(close)}? `{command} --help` lists them all"
    if message.startswith("No such command"):
        return f"`{command} --help` lists the commands"
    if message.startswith("Missing"):
        return f"give it; `{command} --help` shows the usage"
    return f"`{command} --help` says what it takes"


def report(exc: TyperException) -> int:
    """Print a usage error and return its exit code (gpucarve's bad-input code for a usage
    error, the parser's own otherwise)."""
    ctx: Any = getattr(exc, "ctx", None)
    command = ctx.command_path if ctx is not None else "gpucarve"
    if type(exc).__name__ == "NoArgsIsHelpError":
        print(exc.format_message(), file=sys.stderr)
        return int(Exit.INVALID)
    code = _kebab(type(exc).__name__.removesuffix("Error") or "usage")
    message = " ".join(exc.format_message().split())
    print(
        f"{command}: 1 error\nerror: {_field(exc)} [{code}]\n  {message}\n"
        f"  fix: {_fix(exc, command)}",
        file=sys.stderr,
    )
    return int(exc.exit_code)  # 2 (Exit.INVALID) for every usage error
