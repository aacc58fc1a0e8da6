"""`gpucarve import`: bring other tools' files into gpucarve's formats."""

from __future__ import annotations

import json
import time
import urllib.parse
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.text import Text

from gpucarve.cli.common import (
    CatalogOption,
    catalog_or_exit,
    fail,
    out_dir_or_exit,
    policy_or_exit,
    text_out,
)
from gpucarve.cli.output import Exit, console, print_problems, refuse
from gpucarve.config.device_plugin_import import import_device_plugin
from gpucarve.config.gpu_operator_import import import_gpu_operator, report
from gpucarve.config.policy_build import load_policy
from gpucarve.config.quota_import import import_quotas
from gpucarve.core.problems import InvalidInput
from gpucarve.sim.history.export import jsonl, rebased, since_seconds
from gpucarve.sim.history.prometheus import Prometheus, PrometheusError, fetch, rebuild
from gpucarve.sim.traces.alibaba import import_trace

app = typer.Typer(rich_markup_mode=None, help="Import other tools' files.", no_args_is_help=True)


def _model_map(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        code, sep, model = item.partition("=")
        if not sep or not code or not model:
            refuse("--model-map", "bad-model-map", f"{item!a} is not CODE=MODEL",
                   "write CODE=MODEL, e.g. G2=V100-32GB")  # fmt: skip
        out[code] = model
    return out


@app.command("alibaba")
def alibaba(
    nodes: Annotated[Path, typer.Option("--nodes", help="Node list CSV of the trace.")],
    pods: Annotated[Path, typer.Option("--pods", help="Pod list CSV of the trace.")],
    out: Annotated[Path, typer.Option("--out", help="Folder for the files written.")] = Path(
        "out/alibaba"
    ),
    replicas: Annotated[
        int,
        typer.Option(help="Time-slicing replicas per GPU: the granularity of a GPU share.", min=1),
    ] = 10,
    model_map: Annotated[
        list[str] | None,
        typer.Option("--model-map", help="CODE=MODEL: the catalog model for a trace model code."),
    ] = None,
    lenient: Annotated[
        bool, typer.Option("--lenient", help="Skip bad rows (and count them) instead of stopping.")
    ] = False,
    catalog: CatalogOption = None,
) -> None:
    """Turn the Alibaba GPU-sharing trace (node list + pod list) into a policy, a catalog
    extension and a workload trace that `gpucarve simulate` replays."""
    cat = catalog_or_exit(catalog)
    out_dir_or_exit(out, "--out")
    try:
        imported = import_trace(nodes, pods, cat, replicas, _model_map(model_map or []), lenient)
    except InvalidInput as exc:
        fail(exc)
    policy_path, trace_path = out / "policy.yaml", out / "workloads.jsonl"
    policy_path.write_text(yaml.safe_dump(imported.policy, sort_keys=False))
    with trace_path.open("w", encoding="utf-8") as fh:
        for doc in imported.workloads:
            fh.write(json.dumps(doc, sort_keys=True) + "\n")
    catalogs = [str(c) for c in catalog or []]
    if imported.catalog is not None:
        catalog_path = out / "catalog.yaml"
        catalog_path.write_text(yaml.safe_dump(imported.catalog, sort_keys=False))
        catalogs.append(str(catalog_path))
    err = console(stderr=True)
    if imported.problems:
        print_problems(str(pods), imported.problems[:10], err)
        err.print(
            Text(
                f"skipped {imported.skipped_nodes} node row(s), {imported.skipped_pods} pod row(s)",
                style="yellow",
            )
        )
    for note in imported.notes:
        err.print(Text(f"note: {note}", style="yellow"))
    try:  # what is written must be what `simulate` then accepts
        load_policy(policy_path, [Path(c) for c in catalogs])
    except InvalidInput as exc:
        print_problems(exc.source, exc.problems, err)
        err.print(
            Text(
                "the imported policy does not validate; fix: correct the node list's rows "
                "named above, or map the trace's models with --model-map",
                style="red",
            )
        )
        raise typer.Exit(Exit.INVALID) from None
    pools = imported.policy["pools"]
    out_console = console()
    out_console.print(
        f"{sum(p['nodes'] for p in pools)} nodes in {len(pools)} pools, "
        f"{len(imported.workloads)} workloads -> {policy_path}, {trace_path}"
    )
    extra = "".join(f" --catalog {c}" for c in catalogs)
    out_console.print(
        Text(f"gpucarve simulate --policy {policy_path} --trace {trace_path}{extra}", style="bold")
    )


@app.command("device-plugin")
def device_plugin(
    file: Annotated[
        Path,
        typer.Argument(help="The device plugin's ConfigMap (kubectl get cm -o yaml) or a file."),
    ],
) -> None:
    """Read an NVIDIA device-plugin configuration (time-slicing or MPS replicas per named
    configuration) into pool blocks for a policy; add each pool's gpuModel and nodes."""
    try:
        imported = import_device_plugin(file)
    except InvalidInput as exc:
        fail(exc)
    err = console(stderr=True)
    lines = [
        "# pools read from the device plugin's configuration; give each its gpuModel, nodes",
        "# and gpusPerNode (a MIG pool: `sharing: mig` and `gpucarve mig import`); label its",
        "# nodes nvidia.com/device-plugin.config=<the configuration's name>",
    ]
    for c in imported:
        for note in c.notes:
            err.print(Text(f"{file}: {c.name}: {note}", style="yellow"))
    pools = [{"gpuModel": "FILL-IN", **c.pool_block(), "nodes": 0} for c in imported]
    err.print(Text(f"{len(pools)} configurations read from {file}", style="green"))
    typer.echo(
        "\n".join(lines) + "\n" + yaml.safe_dump({"pools": pools}, sort_keys=False), nl=False
    )


@app.command("gpu-operator")
def gpu_operator(
    file: Annotated[
        Path,
        typer.Argument(
            help="The operator's ClusterPolicy (kubectl get clusterpolicy -o yaml) "
            "or the Helm values it was installed with."
        ),
    ],
) -> None:
    """Read the GPU Operator's configuration: its MIG strategy, the ConfigMaps its device
    plugin and MIG manager read, device-plugin configurations given inline (as pool blocks),
    and whether GPU Feature Discovery runs."""
    try:
        cfg = import_gpu_operator(file)
    except InvalidInput as exc:
        fail(exc)
    err = console(stderr=True)
    for line in report(cfg):
        err.print(Text(line))
    for c in cfg.inline:
        for note in c.notes:
            err.print(Text(f"{file}: {c.name}: {note}", style="yellow"))
    if cfg.inline:
        pools = [{"gpuModel": "FILL-IN", **c.pool_block(), "nodes": 0} for c in cfg.inline]
        if cfg.mig_strategy == "single":
            err.print(Text("MIG pools among these: add `mig: {strategy: single}`", style="yellow"))
        typer.echo(yaml.safe_dump({"pools": pools}, sort_keys=False), nl=False)


@app.command("quotas")
def quotas(
    file: Annotated[
        Path,
        typer.Argument(help="kubectl get resourcequota,priorityclass -A -o yaml, or objects."),
    ],
    policy: Annotated[
        Path, typer.Option("--policy", help="A policy whose pools name the flavors.")
    ],
    catalog: CatalogOption = None,
) -> None:
    """Read ResourceQuotas (GPU resources per namespace) and PriorityClasses into queue and
    priorityClasses blocks for a policy: one queue per namespace, its nominal quota per flavor."""
    loaded = policy_or_exit(policy, catalog)
    try:
        blocks = import_quotas(file, loaded.policy)
    except InvalidInput as exc:
        fail(exc)
    console(stderr=True).print(
        Text(
            f"{len(blocks['queues'])} queues, {len(blocks['priorityClasses'])} priority classes "
            f"read from {file}",
            style="green",
        )
    )
    header = "# queues and priority classes read from ResourceQuotas and PriorityClasses\n"
    typer.echo(header + yaml.safe_dump(blocks, sort_keys=False), nl=False)


def _gpu_hours(line: dict[str, Any]) -> float:
    gpus = sum(
        int(v) * int(ps.get("count", 1))
        for ps in line.get("podSets", [])
        for v in (ps.get("resources", {}).get("limits", {}) or {}).values()
    )
    return gpus * int(line.get("duration", 0)) / 3600


@app.command("prometheus")
def prometheus(
    url: Annotated[str, typer.Option("--url", help="Prometheus's address (its HTTP API).")],
    since: Annotated[
        str, typer.Option("--since", help="How far back: 30d, 12h, 90m, 45s.")
    ] = "30d",
    step: Annotated[
        int,
        typer.Option(
            "--step",
            min=1,
            max=3600,
            help="Seconds between the scrapes of kube-state-metrics (the resolution of the "
            "times of pods deleted before they finished).",
        ),
    ] = 30,
    policy: Annotated[
        Path | None,
        typer.Option("--policy", help="Keep only workloads of namespaces a queue governs."),
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Write the history here (default: stdout).")
    ] = None,
    catalog: CatalogOption = None,
) -> None:
    """Rebuild a cluster's GPU workload history from the kube-state-metrics series its
    Prometheus kept, as the trace `gpucarve history replay` reads; say what could not be
    recovered."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        refuse("--url", "bad-url", f"{url!a} is not an http(s) address",
               "give Prometheus's address, e.g. http://127.0.0.1:9090")  # fmt: skip
    try:
        window = since_seconds(since)
    except ValueError as exc:
        refuse("--since", "bad-duration", str(exc), "write a number and a unit: s, m, h or d")
    governed = None
    if policy is not None:
        governed = policy_or_exit(policy, catalog).policy.governed_namespaces()
    now = int(time.time())
    try:
        answers = fetch(Prometheus(url), now, window, step)
    except PrometheusError as exc:
        refuse("--url", "prometheus", str(exc),
               "check the address and that Prometheus scrapes kube-state-metrics")  # fmt: skip
    rebuilt = rebuild(answers, now, gone_after_s=4 * step)
    lines = rebuilt.lines
    if governed is not None:
        kept = [x for x in lines if x["namespace"] in governed]
        if len(kept) < len(lines):
            rebuilt.unrecovered[f"no queue of {policy} governs its namespace"] = len(lines) - len(
                kept
            )
        lines = kept
    text = jsonl(rebased(lines))
    err = console(stderr=True)
    hours = sum(_gpu_hours(x) for x in lines)
    err.print(Text(f"{len(lines)} workloads, {hours:.1f} GPU-hours, from {url}"))
    for why, n in sorted(rebuilt.unrecovered.items()):
        err.print(Text(f"not recovered: {n} ({why})", style="yellow"))
    if text_out(out, text):
        err.print(Text(f"wrote {out}"))
