"""`gpucarve apply` and `gpucarve queues`: the policy on a cluster, and read back."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.table import Table

from gpucarve.cli.common import CatalogOption, policy_or_exit
from gpucarve.cli.kube_options import (
    ContextOption,
    KubeconfigOption,
    RequestTimeoutOption,
    api_error_exit,
    client_or_exit,
)
from gpucarve.cli.output import console
from gpucarve.core.vocabulary import GROUP, VERSION
from gpucarve.kube.api.client import ApiError, Client, object_path
from gpucarve.kube.api.crds import crd_manifests
from gpucarve.render.objects import policy_objects, queue_summary


def _established(client: Client, name: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
    while time.monotonic() < deadline:
        conds = (client.get(path).get("status") or {}).get("conditions") or []
        if any(c["type"] == "Established" and c["status"] == "True" for c in conds):
            return
        time.sleep(0.2)
    raise ApiError("GET", path, 0, "the CRD did not become Established")


def apply(
    policy: Annotated[Path, typer.Option("--policy", help="Policy YAML file.")],
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the objects instead of applying them.")
    ] = False,
    request_timeout: RequestTimeoutOption = 120.0,
    catalog: CatalogOption = None,
) -> None:
    """Apply the CRDs, the policy's priority classes and its queues to a cluster (server-side
    apply, field manager `gpucarve`; running it again changes nothing)."""
    loaded = policy_or_exit(policy, catalog)
    objects: list[dict[str, Any]] = [*crd_manifests(), *policy_objects(loaded.policy)]
    if dry_run:
        typer.echo(yaml.safe_dump_all(objects, sort_keys=False), nl=False)
        return
    client = client_or_exit(kubeconfig, context, request_timeout)
    out = console()
    try:
        for obj in objects:
            client.apply(object_path(obj), obj)
            if obj["kind"] == "CustomResourceDefinition":
                _established(client, obj["metadata"]["name"])
            out.print(f"{obj['kind']}/{obj['metadata']['name']} applied")
    except ApiError as exc:
        api_error_exit(exc)


def queues(
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    request_timeout: RequestTimeoutOption = 60.0,
) -> None:
    """List the cluster's gpucarve Queues: quota per flavor and, once the scheduler runs,
    usage and pending work."""
    client = client_or_exit(kubeconfig, context, request_timeout)
    try:
        items = client.get(f"/apis/{GROUP}/{VERSION}/queues")["items"]
    except ApiError as exc:
        api_error_exit(exc)
    table = Table(title=f"{len(items)} queues")
    for col in ("queue", "cohort", "weight", "quota (nominal)", "usage", "pending"):
        table.add_column(col)
    for obj in sorted(items, key=lambda o: o["metadata"]["name"]):
        q = queue_summary(obj)
        quota = ", ".join(f"{f} {v['nominal']}" for f, v in sorted(q["quota"].items()))
        usage = ", ".join(f"{f} {n}" for f, n in sorted(q["status"].get("usage", {}).items()))
        table.add_row(
            q["name"],
            q["cohort"] or "-",
            f"{q['weight']:g}",
            quota,
            usage or "-",
            str(q["status"].get("pendingWorkloads", "-")),
        )
    console().print(table)
