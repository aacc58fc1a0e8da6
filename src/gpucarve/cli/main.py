"""The `gpucarve` command. Each command's module is imported only when that command runs (or
its help is asked): `gpucarve --help`, `--version` and `kubectl gpucarve explain` do not pay
for the engine, the simulator and the Kubernetes client (about a second of CPU) they do not
use. The listing's one-line helps are kept here, and a test holds them to the commands' own."""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup
from typer.exceptions import Abort, TyperException

from gpucarve import __version__
from gpucarve.cli import usage
from gpucarve.cli.output import Exit


@dataclass(frozen=True)
class Lazy:
    """A command found by name: `attr` of `gpucarve.cli.<module>` is its function or, for a
    group of commands, its Typer app; `short` is what the listing says of it."""

    name: str
    module: str
    attr: str
    short: str


COMMANDS = (
    Lazy(
        "init",
        "init_cmd",
        "init",
        (
            "Write a starter policy (the three-team example, commented) and example workloads for "
            "`gpucarve plan`, to edit for your own cluster."
        ),
    ),
    Lazy(
        "validate",
        "policy_cmd",
        "validate",
        "Validate a policy file: print every problem with its path, reason and fix.",
    ),
    Lazy(
        "plan",
        "plan_cmd",
        "plan",
        (
            "Admit and place WORKLOADS on the empty cluster of POLICY in one cycle; say why each "
            "workload that stays pending does."
        ),
    ),
    Lazy(
        "simulate",
        "simulate_cmd",
        "simulate",
        (
            "Replay a seeded three-team synthetic workload on POLICY under kube-default, static-"
            "quota and gpucarve, and compare allocation, SM utilisation, waits, dev time to first "
            "GPU, gang first-try success, GPU-hours held by incomplete gangs, preemptions and cost "
            "per team."
        ),
    ),
    Lazy(
        "apply",
        "apply_cmd",
        "apply",
        (
            "Apply the CRDs, the policy's priority classes and its queues to a cluster (server-side"
            " apply, field manager `gpucarve`; running it again changes nothing)."
        ),
    ),
    Lazy(
        "queues",
        "apply_cmd",
        "queues",
        (
            "List the cluster's gpucarve Queues: quota per flavor and, once the scheduler runs, "
            "usage and pending work."
        ),
    ),
    Lazy(
        "scheduler",
        "scheduler_cmd",
        "scheduler",
        (
            "Run the gpucarve scheduler: bind pending pods by the policy's quotas, gangs and "
            "placement, say why the others wait, and preempt through the Eviction API."
        ),
    ),
    Lazy(
        "explain",
        "explain_cmd",
        "explain",
        (
            "Why POD waits: its queue's quota and usage, its turn by fair share, its gang, the "
            "decision and which filters refused how many nodes, and what would let it run."
        ),
    ),
    Lazy(
        "adopt",
        "adopt_cmd",
        "adopt",
        (
            "Read the cluster as it is into a policy: pools from its GPU nodes (model, GPUs, "
            "sharing mode, MIG layout), queues from its ResourceQuotas, its priority classes; "
            "report what runs where."
        ),
    ),
    Lazy(
        "node-agent",
        "agent_cmd",
        "node_agent",
        (
            "Read every GPU through NVML each `gpuHealth.checkSeconds` (XIDs as they come), take "
            "failing GPUs out of service on the Node with hysteresis, and bring them back after "
            "clean checks; the scheduler places nothing new on a GPU out of service."
        ),
    ),
    Lazy(
        "policy",
        "policy_cmd",
        "policy_app",
        "The policy file format.",
    ),
    Lazy(
        "cluster",
        "policy_cmd",
        "cluster_app",
        "The cluster a policy describes.",
    ),
    Lazy(
        "mig",
        "mig_cmd",
        "app",
        "MIG geometry: valid layouts of a GPU model, and checks.",
    ),
    Lazy(
        "bench",
        "bench_cmd",
        "app",
        "Benchmarks that reproduce published experiments.",
    ),
    Lazy(
        "history",
        "history_cmd",
        "app",
        "A cluster's recorded history: export it as a trace, replay it in the simulator.",
    ),
    Lazy(
        "import",
        "import_cmd",
        "app",
        "Import other tools' files.",
    ),
    Lazy(
        "dev-cluster",
        "devcluster_cmd",
        "app",
        "A local Kubernetes control plane with fake GPU nodes.",
    ),
    Lazy(
        "render",
        "render_cmd",
        "app",
        "Render the NVIDIA stack's configuration from a policy.",
    ),
    Lazy(
        "webhook",
        "webhook_cmd",
        "app",
        "The admission webhook and its certificate.",
    ),
    Lazy(
        "catalog",
        "catalog_cmd",
        "app",
        "The GPU catalog.",
    ),
)
BY_NAME = {c.name: c for c in COMMANDS}


# The click types typer builds on are its own (vendored) in some versions and click's in
# others: commands and contexts are passed through untyped.
def load(entry: Lazy) -> Any:
    """The click command of `entry`, its module imported now."""
    found: Any = getattr(importlib.import_module(f"gpucarve.cli.{entry.module}"), entry.attr)
    if isinstance(found, typer.Typer):
        group = typer.main.get_group(found)
        group.name = entry.name
        return group
    one = typer.Typer(rich_markup_mode=None, pretty_exceptions_enable=False, add_completion=False)
    one.command(entry.name)(found)
    return typer.main.get_command(one)


class LazyGroup(TyperGroup):
    """The root group: commands listed from `COMMANDS`, imported when resolved."""

    def list_commands(self, ctx: Any) -> list[str]:
        return [c.name for c in COMMANDS]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in self.commands and cmd_name in BY_NAME:
            self.commands[cmd_name] = load(BY_NAME[cmd_name])
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        # the listing of stand-ins that carry only the help: shortened as the commands' own
        listing = [TyperCommand(name=c.name, help=c.short) for c in COMMANDS]
        TyperGroup(name=self.name, commands=listing).format_commands(ctx, formatter)


app = typer.Typer(
    cls=LazyGroup,
    rich_markup_mode=None,
    name="gpucarve",
    help="Share a Kubernetes cluster's GPUs fully and fairly.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


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
