"""`gpucarve adopt`: read a live cluster (nodes as GFD and the device plugin describe them,
ResourceQuotas, PriorityClasses, the pods running on GPUs) into a policy that validates, and
report what runs where and what the policy as read would warn of. Reads only."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.text import Text

from gpucarve.cli.common import CatalogOption, catalog_or_exit
from gpucarve.cli.kube_options import (
    ContextOption,
    KubeconfigOption,
    RequestTimeoutOption,
    api_error_exit,
    client_or_exit,
)
from gpucarve.cli.output import Exit, console
from gpucarve.config.policy_build import build_policy
from gpucarve.core.problems import InvalidInput
from gpucarve.kube.adopt import adopt as adopt_nodes
from gpucarve.kube.adopt import said_problem, with_quotas
from gpucarve.kube.api.client import ApiError, Client

PAGE = 500


def _list(client: Client, path: str) -> list[dict[str, Any]]:
    """Every item of a list, page by page (`limit` and `continue`)."""
    items: list[dict[str, Any]] = []
    token = ""
    while True:
        sep = "&" if "?" in path else "?"
        page = client.get(f"{path}{sep}limit={PAGE}" + (f"&continue={token}" if token else ""))
        items += page.get("items") or []
        token = (page.get("metadata") or {}).get("continue") or ""
        if not token:
            return items


def _slices(client: Client) -> list[dict[str, Any]]:
    """The DRA drivers' ResourceSlices (none where the server serves no resource.k8s.io/v1)."""
    try:
        return _list(client, "/apis/resource.k8s.io/v1/resourceslices")
    except ApiError as exc:
        if exc.status == 404:
            return []
        raise


def adopt(
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Write the policy here (default: standard output)."),
    ] = None,
    name: Annotated[str, typer.Option(help="The policy's name.")] = "adopted",
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    request_timeout: RequestTimeoutOption = 30.0,
    catalog: CatalogOption = None,
) -> None:
    """Read the cluster as it is into a policy: pools from its GPU nodes (model, GPUs,
    sharing mode, MIG layout), queues from its ResourceQuotas, its priority classes; report
    what runs where. Nothing in the cluster is changed."""
    cat = catalog_or_exit(catalog)
    client = client_or_exit(kubeconfig, context, request_timeout)
    try:
        nodes = _list(client, "/api/v1/nodes")
        objects = _list(client, "/api/v1/resourcequotas")
        objects += [
            {**pc, "kind": "PriorityClass"}
            for pc in _list(client, "/apis/scheduling.k8s.io/v1/priorityclasses")
            if not str((pc.get("metadata") or {}).get("name", "")).startswith("system-")
        ]
        pods = _list(client, "/api/v1/pods?fieldSelector=status.phase%3DRunning")
        slices = _slices(client)
    except ApiError as exc:
        api_error_exit(exc)
    for q in objects:
        q.setdefault("kind", "ResourceQuota")
    err = console(stderr=True)
    adopted = adopt_nodes(nodes, cat, name, slices)
    if not adopted.doc["pools"]:
        for line in adopted.report:
            err.print(Text(line, style="yellow"))
        err.print(
            Text(
                "adopt: no GPU node with GPU Feature Discovery's labels [no-gpu-nodes]; "
                "fix: run GFD (the GPU Operator does) on the GPU nodes",
                style="red",
            )
        )
        raise typer.Exit(Exit.INVALID)
    try:
        pools_only = build_policy(adopted.doc, cat, "the cluster's nodes").policy
    except InvalidInput as exc:
        for p in exc.problems:
            err.print(Text(f"adopt: the pools read do not validate: {said_problem(p)}",
                           style="red"))  # fmt: skip
        raise typer.Exit(Exit.INVALID) from None
    with_quotas(adopted, objects, pools_only, pods)
    try:
        loaded = build_policy(adopted.doc, cat, "the policy read")
    except InvalidInput as exc:
        # quotas that do not fit together: the pools are still worth having
        adopted.report += [f"left out: {said_problem(p)}" for p in exc.problems]
        adopted.doc["queues"] = []
        loaded = build_policy(adopted.doc, cat, "the policy read")
    for line in adopted.report:
        err.print(Text(line))
    for w in loaded.warnings:
        err.print(Text(f"as read: {said_problem(w)}", style="yellow"))
    text = yaml.safe_dump(adopted.doc, sort_keys=False)
    if out is None:
        typer.echo(text, nl=False)
    else:
        out.write_text(text)
        err.print(Text(f"wrote {out}; check it with gpucarve validate {out}", style="green"))
