"""`gpucarve validate`, `gpucarve policy schema` and `gpucarve cluster summary`."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from gpucarve.cli.common import (
    CatalogOption,
    OptionalPolicyFile,
    PolicyOption,
    one_policy,
    policy_file,
    policy_or_exit,
)
from gpucarve.cli.output import Exit, console, print_problems, print_problems_json
from gpucarve.config.policy_build import load_policy
from gpucarve.config.policy_model import policy_json_schema
from gpucarve.core.amounts import QuotaKey
from gpucarve.core.cluster import build_cluster
from gpucarve.core.cohort_tree import tree_lines
from gpucarve.core.policy import Policy, SharingMode
from gpucarve.core.problems import InvalidInput

HOURS_PER_MONTH = 730

policy_app = typer.Typer(
    rich_markup_mode=None, help="The policy file format.", no_args_is_help=True
)
cluster_app = typer.Typer(
    rich_markup_mode=None, help="The cluster a policy describes.", no_args_is_help=True
)


class Format(StrEnum):
    text = "text"
    json = "json"


def validate(
    file: OptionalPolicyFile = None,
    catalog: CatalogOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    output: Annotated[
        Format,
        typer.Option("--format", hidden=True, help="Deprecated: --json (as every other command)."),
    ] = Format.text,
    policy: PolicyOption = None,
) -> None:
    """Validate a policy file: print every problem with its path, reason and fix.

    Exit 0 when valid (warnings allowed), 2 when it has errors.
    """
    if output is Format.json:
        console(stderr=True).print(
            Text("gpucarve validate: --format json is deprecated; use --json"), style="yellow"
        )
    output = Format.json if as_json else output
    out = console()
    file = policy_file(one_policy(file, policy))
    try:
        # catalog files are read here too: their errors are reported like the policy's
        loaded = load_policy(file, catalog or [])
    except InvalidInput as exc:
        if output is Format.json:
            print_problems_json(exc.source, exc.problems, out)
        else:
            print_problems(exc.source, exc.problems, console(stderr=True))
        raise typer.Exit(Exit.INVALID) from None
    if output is Format.json:
        print_problems_json(str(file), loaded.warnings, out)
        return
    if loaded.warnings:
        print_problems(str(file), loaded.warnings, console(stderr=True))
    p = loaded.policy
    gpus = sum(pool.gpus for pool in p.pools)
    out.print(
        Text(
            f"{file}: valid policy {p.name!r}: {len(p.pools)} pools, {gpus} GPUs, "
            f"{len(p.flavors)} flavors, {len(p.queues)} queues",
            style="green",
        )
    )
    for line in unit_lines(p):
        out.print(Text(line))
    if p.nested:
        for line in tree_lines(p):
            out.print(Text(line))


def unit_lines(p: Policy) -> list[str]:
    """What each quota in a GPU unit comes to in the unit's flavors."""
    out = []
    for q in p.queues:
        for x in q.quotas:
            unit = p.units.get(x.flavor)
            if unit is None:
                continue
            each = ", ".join(
                f"{x.nominal // cost} × {name} ({unit.gpus_text(cost)} GPU each)"
                for name, cost in unit.charges
            )
            out.append(
                f"queue {q.name}: {x.flavor} {unit.gpus_text(x.nominal)} GPUs "
                f"({unit.model_id}) = up to {each}"
            )
    return out


@policy_app.command("schema")
def schema() -> None:
    """Print the policy file's JSON Schema."""
    typer.echo(json.dumps(policy_json_schema(), indent=2, sort_keys=True))


def _sharing(policy: Policy, name: str) -> str:
    pool = policy.pool(name)
    if pool.sharing is SharingMode.MIG:
        layouts = sorted({" + ".join(i.describe() for i in lay) for lay in pool.mig_layouts})
        return "mig: " + "; ".join(layouts)
    if pool.sharing in (SharingMode.TIME_SLICING, SharingMode.MPS):
        return f"{pool.sharing} ×{pool.replicas}"
    return str(pool.sharing)


def _key(p: Policy, key: QuotaKey, n: int) -> str:
    unit = p.units.get(key)
    return f"{key} {n}" if unit is None else f"{key} {unit.gpus_text(n)} GPUs"


def _money(v: float | None) -> str:
    return "n/a" if v is None else f"${v:,.2f}"


@cluster_app.command("summary")
def summary(
    file: OptionalPolicyFile = None, catalog: CatalogOption = None, policy: PolicyOption = None
) -> None:
    """Print the pools, GPUs, slices per flavor and hourly price of a policy's cluster."""
    loaded = policy_or_exit(policy_file(one_policy(file, policy)), catalog)
    p = loaded.policy
    state = build_cluster(p)
    out = console()
    pools = Table(title=f"Pools of {p.name}")
    for col in (
        "pool",
        "model",
        "nodes × GPUs",
        "sharing",
        "flavors",
        "$/GPU-h",
        "$/hour",
        "$/month",
    ):
        pools.add_column(col, justify="right" if col.startswith(("$", "nodes")) else "left")
    total_h = 0.0
    unpriced: list[str] = []
    for pool in p.pools:
        hourly = pool.hourly_price()
        if hourly is None:
            unpriced.append(pool.name)
        else:
            total_h += hourly
        pools.add_row(
            pool.name,
            pool.model.id,
            f"{pool.nodes} × {pool.gpus_per_node} = {pool.gpus}",
            _sharing(p, pool.name),
            ", ".join(f.name for f in pool.flavors()),
            _money(pool.price_per_gpu_hour),
            _money(hourly),
            _money(None if hourly is None else hourly * HOURS_PER_MONTH),
        )
    gpus = sum(pool.gpus for pool in p.pools)
    pools.add_row(
        "total",
        "",
        str(gpus),
        "",
        "",
        "",
        # the priced pools' sum, marked, rather than no total at all for one unpriced pool
        _money(total_h) + ("*" if unpriced else ""),
        _money(total_h * HOURS_PER_MONTH) + ("*" if unpriced else ""),
        style="bold",
    )
    out.print(pools)
    if unpriced:
        out.print(
            Text(
                f"* without pool {', '.join(unpriced)}: no price for its model; fix: set the "
                "pool's pricePerGpuHour (or the model's price in a --catalog file)"
            )
        )

    flavors = Table(title="Flavors (quota is counted in slices)")
    for col in (
        "flavor",
        "kind",
        "slices",
        "compute/slice",
        "memory/slice",
        "resource",
        "quota (nominal)",
    ):
        flavors.add_column(col, justify="right" if col in ("slices", "quota (nominal)") else "left")
    for name, f in p.flavors.items():
        # a GPU unit's quota may go to any of its flavors: counted where it covers this one
        nominal = sum(
            min(
                (qt.nominal // cost for key, cost in keys if (qt := queue.quota(key))),
                default=0,
            )
            for queue in p.queues
            if (keys := p.quota_keys(queue, name))
        )
        flavors.add_row(
            name,
            str(f.kind),
            str(p.capacity[name]),
            f"{f.compute_milli / 1000:.3f} GPU",
            f"{f.memory_mib:,} MiB",
            f.resource_name,
            f"{nominal}/{p.capacity[name]}",
        )
    out.print(flavors)

    if p.queues:
        queues = Table(title="Queues")
        for col in ("queue", "cohort", "weight", "nominal quota", "borrow ≤", "lend ≤"):
            queues.add_column(col)
        for q in p.queues:
            queues.add_row(
                q.name,
                q.cohort or "-",
                f"{q.weight_milli / 1000:g}",
                ", ".join(_key(p, x.flavor, x.nominal) for x in q.quotas),
                ", ".join(
                    _key(p, x.flavor, x.borrowing_limit.most)
                    for x in q.quotas
                    if x.borrowing_limit.most is not None
                )
                or "-",
                ", ".join(
                    _key(p, x.flavor, x.lending_limit.most)
                    for x in q.quotas
                    if x.lending_limit.most is not None
                )
                or "-",
            )
        out.print(queues)
    problems = state.invariant_violations()
    if problems:  # pragma: no cover - a bug in build_cluster, never bad input
        raise RuntimeError("; ".join(problems))
    out.print(Text(f"{len(state.nodes)} nodes, {gpus} GPUs, {len(state.slices)} slices"))
