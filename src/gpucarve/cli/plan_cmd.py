"""`gpucarve plan`: run one scheduling cycle on a policy's empty cluster and show every
decision with its reason."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from gpucarve.cli.common import (
    CatalogOption,
    OptionalPolicyFile,
    PolicyOption,
    fail,
    one_policy,
    policy_file,
    policy_or_exit,
)
from gpucarve.cli.output import Exit, console
from gpucarve.config.examples import WORKLOADS, example_path
from gpucarve.config.workload_spec import build_workloads
from gpucarve.config.yaml_source import read_yaml
from gpucarve.core.amounts import QuotaKey
from gpucarve.core.cluster import build_cluster
from gpucarve.core.policy import Policy
from gpucarve.core.problems import InvalidInput, Problem
from gpucarve.core.problems import Path as ProblemPath
from gpucarve.core.snapshot import Snapshot
from gpucarve.engine import CycleResult, run_whole_cycle
from gpucarve.engine.explain import explain, render


def _items(data: Any, source: str) -> tuple[list[Any], ProblemPath]:
    if isinstance(data, dict) and isinstance(data.get("workloads"), list):
        return list(data["workloads"]), ("workloads",)
    if isinstance(data, list):
        return data, ()
    raise InvalidInput(
        source,
        [
            Problem(
                (),
                "not-a-workload-list",
                "expected a list of workloads, or a mapping with a `workloads:` list",
                "write `workloads: [{name: ..., namespace: ..., podSets: [...]}]`",
            )
        ],
    )


def _amount(policy: Policy, key: QuotaKey, n: int) -> str:
    unit = policy.units.get(key)
    return f"{n} {key}" if unit is None else f"{unit.gpus_text(n)} {key} GPUs"


def _as_json(result: CycleResult) -> str:
    return json.dumps(
        {
            "now": result.now,
            "admissions": [
                {
                    "workload": a.workload,
                    "queue": a.queue,
                    "charged": dict(a.charged),
                    "borrowed": dict(a.borrowed),
                    "pods": [
                        {"pod": p.pod, "node": p.node, "slices": list(p.slice_ids)} for p in a.pods
                    ],
                }
                for a in result.admissions
            ],
            "pending": [
                {
                    "workload": p.workload,
                    "queue": p.queue,
                    "stage": str(p.reason.stage),
                    "plugin": p.reason.plugin,
                    "message": p.reason.message,
                }
                for p in result.pending
            ],
        },
        indent=2,
    )


def plan(
    policy: OptionalPolicyFile = None,
    workloads: Annotated[
        Path | None,
        typer.Argument(
            help="Workloads YAML file (a list, or `workloads:`); default: the built-in "
            "example's, with the built-in policy.",
            show_default=False,
        ),
    ] = None,
    now: Annotated[
        int, typer.Option(help="Clock for the cycle, in seconds.", min=0, max=10**10)
    ] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    explain_workload: Annotated[
        str | None,
        typer.Option(
            "--explain",
            help="Explain one workload (NAMESPACE/NAME) as `gpucarve explain` does on a cluster.",
        ),
    ] = None,
    catalog: CatalogOption = None,
    policy_option: PolicyOption = None,
) -> None:
    """Admit and place WORKLOADS on the empty cluster of POLICY in one cycle; say why each
    workload that stays pending does."""
    if policy_option is not None and workloads is None:
        # `plan --policy P W`: the one argument is the workloads
        policy, workloads = policy_option, policy
    else:
        policy = one_policy(policy, policy_option)
    if workloads is None:
        if policy is not None:
            console(stderr=True).print(
                Text(f"plan {policy}: which workloads? fix: pass a WORKLOADS file", style="red")
            )
            raise typer.Exit(Exit.INVALID)
        workloads = example_path(WORKLOADS)
    loaded = policy_or_exit(policy_file(policy), catalog)
    try:
        doc = read_yaml(workloads, "a workloads YAML file")
        items, prefix = _items(doc.data, doc.source)
        try:
            ws = build_workloads(items, loaded.policy, doc.source, prefix)
        except InvalidInput as exc:
            lined = [replace(p, line=doc.line_of(p.path)) for p in exc.problems]
            raise InvalidInput(exc.source, lined) from None
    except InvalidInput as exc:
        fail(exc)
    snapshot = Snapshot(loaded.policy, build_cluster(loaded.policy), (), tuple(ws))
    result = run_whole_cycle(snapshot, now)
    out = console()
    if explain_workload is not None:
        e = explain(snapshot, result, explain_workload)
        if e is None:
            known = ", ".join(w.id for w in ws[:5])
            console(stderr=True).print(
                Text(f"--explain {explain_workload}: no such workload; fix: name one of {known}")
            )
            raise typer.Exit(Exit.INVALID)
        for line in render(e):
            typer.echo(line)
        return
    if as_json:
        typer.echo(_as_json(result))
        return
    admitted = Table(
        title=f"Admitted: {len(result.admissions)} workloads, {result.stats.pods_placed} pods"
    )
    for col in ("workload", "queue", "charged", "borrowed", "placement"):
        admitted.add_column(col)
    for a in result.admissions:
        nodes = sorted({p.node for p in a.pods})
        where = ", ".join(nodes[:3]) + (f" (+{len(nodes) - 3} nodes)" if len(nodes) > 3 else "")
        admitted.add_row(
            a.workload,
            a.queue,
            ", ".join(f"{n} {f}" for f, n in a.charged) or "-",
            ", ".join(_amount(loaded.policy, k, n) for k, n in a.borrowed) or "-",
            f"{len(a.pods)} pod{'s' if len(a.pods) != 1 else ''} on {where}",
        )
    out.print(admitted)
    if result.pending:
        pending = Table(title=f"Pending: {len(result.pending)} workloads")
        for col in ("workload", "queue", "stage", "why"):
            pending.add_column(col)
        for p in result.pending:
            pending.add_row(
                p.workload, p.queue, f"{p.reason.stage}/{p.reason.plugin}", p.reason.message
            )
        out.print(pending)
    else:
        out.print(Text("nothing pending", style="green"))
