"""`gpucarve apply` and `gpucarve queues`: the policy on a cluster, and read back."""

from __future__ import annotations

import time
import urllib.parse
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.table import Table
from rich.text import Text

from gpucarve.cli.common import CatalogOption, policy_or_exit
from gpucarve.cli.kube_options import (
    ContextOption,
    KubeconfigOption,
    RequestTimeoutOption,
    api_error_exit,
    client_or_exit,
)
from gpucarve.cli.output import console, refuse
from gpucarve.core.vocabulary import GROUP, VERSION
from gpucarve.core.vocabulary import MANAGED_BY_LABEL as MANAGED_LABEL
from gpucarve.kube.api.client import FIELD_MANAGER, ApiError, Client, object_path
from gpucarve.kube.api.crds import crd_manifests
from gpucarve.kube.api.diff import change
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
    diff: Annotated[
        bool,
        typer.Option(
            "--diff",
            help="Change nothing: say what applying would create or change on the cluster, "
            "field by field (the API server's own dry run), and which queues and priority "
            "classes of gpucarve's the policy no longer names.",
        ),
    ] = False,
    request_timeout: RequestTimeoutOption = 120.0,
    catalog: CatalogOption = None,
) -> None:
    """Apply the CRDs, the policy's priority classes and its queues to a cluster (server-side
    apply, field manager `gpucarve`; running it again changes nothing)."""
    if dry_run and diff:
        refuse("--diff", "dry-run-and-diff", "--dry-run prints the objects without a cluster; "
               "--diff compares them with one", "give one of them")  # fmt: skip
    loaded = policy_or_exit(policy, catalog)
    objects: list[dict[str, Any]] = [*crd_manifests(), *policy_objects(loaded.policy)]
    if dry_run:
        typer.echo(yaml.safe_dump_all(objects, sort_keys=False), nl=False)
        return
    client = client_or_exit(kubeconfig, context, request_timeout)
    out = console()
    if diff:
        try:
            _print_diff(client, objects)
        except ApiError as exc:
            api_error_exit(exc)
        return
    try:
        for obj in objects:
            client.apply(object_path(obj), obj)
            if obj["kind"] == "CustomResourceDefinition":
                _established(client, obj["metadata"]["name"])
            out.print(f"{obj['kind']}/{obj['metadata']['name']} applied")
    except ApiError as exc:
        api_error_exit(exc)


def _current(client: Client, path: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = client.get(path)
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise
    return found


def _would(client: Client, obj: dict[str, Any]) -> dict[str, Any] | None:
    """The object as applying it would leave it (None: its kind is not served yet: its CRD
    is among what would be created)."""
    path = f"{object_path(obj)}?fieldManager={FIELD_MANAGER}&force=true&dryRun=All"
    try:
        found: dict[str, Any] = client.call("PATCH", path, obj, "application/apply-patch+yaml")
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise
    return found


def _print_diff(client: Client, objects: list[dict[str, Any]]) -> None:
    out = console()
    counts: dict[str, int] = {}
    served = _served(client)  # no Queue exists before its CRD does
    for obj in objects:
        what = f"{obj['kind']}/{obj['metadata']['name']}"
        ours = obj["kind"] in ("Queue", "Cohort")
        current = _current(client, object_path(obj)) if served or not ours else None
        would = _would(client, obj) if current is not None else None
        c = change(what, current, would or obj)
        counts[c.action] = counts.get(c.action, 0) + 1
        if c.action == "unchanged":
            continue
        out.print(Text(f"{c.action}: {what}", style="bold"))
        for line in c.diff:
            style = "green" if line.startswith("+") else "red" if line.startswith("-") else None
            out.print(Text(f"  {line}", style=style or ""))
    for what in _not_named(client, objects):
        counts["stays"] = counts.get("stays", 0) + 1
        out.print(Text(f"stays: {what} (the policy no longer names it; apply never deletes: "
                       "`kubectl delete` it if it should go)", style="yellow"))  # fmt: skip
    summary = ", ".join(f"{n} {a}" for a, n in sorted(counts.items()))
    out.print(Text(f"apply would: {summary} (nothing was changed)"))


def _served(client: Client, plural: str = "queues") -> bool:
    crd = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{plural}.{GROUP}"
    return _current(client, crd) is not None


def _not_named(client: Client, objects: list[dict[str, Any]]) -> list[str]:
    """gpucarve's queues, cohorts and priority classes on the cluster that the policy does not
    name."""
    named = {(o["kind"], o["metadata"]["name"]) for o in objects}
    found: list[str] = []
    for kind, plural in (("Queue", "queues"), ("Cohort", "cohorts")):
        if not _served(client, plural):
            continue
        for q in client.get(f"/apis/{GROUP}/{VERSION}/{plural}").get("items", []):
            if (kind, q["metadata"]["name"]) not in named:
                found.append(f"{kind}/{q['metadata']['name']}")
    selector = "?labelSelector=" + urllib.parse.quote(f"{MANAGED_LABEL}=gpucarve")
    for pc in client.get(f"/apis/scheduling.k8s.io/v1/priorityclasses{selector}").get("items", []):
        if ("PriorityClass", pc["metadata"]["name"]) not in named:
            found.append(f"PriorityClass/{pc['metadata']['name']}")
    return sorted(found)


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
