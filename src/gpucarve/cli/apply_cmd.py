"""`gpucarve apply` and `gpucarve queues`: the policy on a cluster, and read back."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.table import Table
from rich.text import Text

from gpucarve.cli.common import CatalogOption, policy_or_exit
from gpucarve.cli.output import Exit, console, print_problems
from gpucarve.core.problems import InvalidInput
from gpucarve.kube.client import ApiError, Client, object_path
from gpucarve.kube.crds import GROUP, VERSION, crd_manifests
from gpucarve.kube.objects import policy_objects, queue_summary

KubeconfigOption = Annotated[
    Path | None, typer.Option("--kubeconfig", help="Kubeconfig (default: $KUBECONFIG).")
]


def client_or_exit(kubeconfig: Path | None) -> Client:
    try:
        return Client.from_kubeconfig(kubeconfig)
    except InvalidInput as exc:
        err = console(stderr=True)
        print_problems(exc.source, exc.problems, err)
        err.print(Text(f"cannot use the kubeconfig {exc.source}: it is not YAML gpucarve reads"))
        err.print(Text("fix: pass --kubeconfig with a file that has a current context"))
        raise typer.Exit(Exit.INVALID) from None
    except (OSError, KeyError, StopIteration, TypeError, AttributeError, yaml.YAMLError) as exc:
        where = kubeconfig or "$KUBECONFIG / ~/.kube/config"
        reason = "no such file" if isinstance(exc, FileNotFoundError) else "not a usable kubeconfig"
        err = console(stderr=True)
        err.print(Text(f"cannot use the kubeconfig {where}: {reason} ({exc})", style="red"))
        err.print(Text("fix: pass --kubeconfig with a file that has a current context"))
        raise typer.Exit(Exit.INVALID) from None


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
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the objects instead of applying them.")
    ] = False,
    catalog: CatalogOption = None,
) -> None:
    """Apply the CRDs, the policy's priority classes and its queues to a cluster (server-side
    apply, field manager `gpucarve`; running it again changes nothing)."""
    loaded = policy_or_exit(policy, catalog)
    objects: list[dict[str, Any]] = [*crd_manifests(), *policy_objects(loaded.policy)]
    if dry_run:
        typer.echo(yaml.safe_dump_all(objects, sort_keys=False), nl=False)
        return
    client = client_or_exit(kubeconfig)
    out = console()
    try:
        for obj in objects:
            client.apply(object_path(obj), obj)
            if obj["kind"] == "CustomResourceDefinition":
                _established(client, obj["metadata"]["name"])
            out.print(f"{obj['kind']}/{obj['metadata']['name']} applied")
    except ApiError as exc:
        console(stderr=True).print(Text(str(exc), style="red"))
        raise typer.Exit(Exit.INVALID) from None


def queues(kubeconfig: KubeconfigOption = None) -> None:
    """List the cluster's gpucarve Queues: quota per flavor and, once the scheduler runs,
    usage and pending work."""
    client = client_or_exit(kubeconfig)
    try:
        items = client.get(f"/apis/{GROUP}/{VERSION}/queues")["items"]
    except ApiError as exc:
        console(stderr=True).print(Text(str(exc), style="red"))
        raise typer.Exit(Exit.INVALID) from None
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
