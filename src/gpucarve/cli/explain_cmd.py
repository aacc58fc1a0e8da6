"""`gpucarve explain NAMESPACE/POD` (also `kubectl gpucarve explain`): why a pod waits, read
from the cluster, decided by the scheduler's own engine, nothing written."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.text import Text

from gpucarve.cli.common import CatalogOption, fail, policy_or_exit
from gpucarve.cli.kube_options import (
    ContextOption,
    KubeconfigOption,
    RequestTimeoutOption,
    api_error_exit,
    client_or_exit,
)
from gpucarve.cli.output import Exit, console
from gpucarve.config.policy_build import load_policy_text
from gpucarve.core.policy import Policy
from gpucarve.core.problems import InvalidInput
from gpucarve.kube.api.client import ApiError, Client
from gpucarve.kube.scheduler.explain import NoSuchPod, explain_pod

POLICY_KEY = "policy.yaml"


# a Kubernetes object name (DNS-1123 subdomain); a pod name is never anything else
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


def _policy(
    client: Client, path: Path | None, config_map: str | None, catalog: list[Path] | None
) -> Policy:
    if path is not None:
        return policy_or_exit(path, catalog).policy
    assert config_map is not None
    ns, _, name = config_map.partition("/")
    if not ns or not name or not (_NAME.match(ns) and _NAME.match(name)):
        _refuse(f"--policy-config-map {config_map!a}", "write it as NAMESPACE/NAME")
    try:
        data = client.get(f"/api/v1/namespaces/{ns}/configmaps/{name}").get("data") or {}
    except ApiError as err:
        api_error_exit(err)
    if POLICY_KEY not in data:
        _refuse(
            f"ConfigMap {config_map} has no key {POLICY_KEY}",
            "point --policy-config-map at the chart's policy ConfigMap, or pass --policy",
        )
    try:
        return load_policy_text(
            data[POLICY_KEY], f"{config_map}:{POLICY_KEY}", catalog or []
        ).policy
    except InvalidInput as exc:
        fail(exc)


def _refuse(what: str, fix: str) -> NoReturn:
    err = console(stderr=True)
    err.print(Text(what, style="red"))
    err.print(Text(f"fix: {fix}"))
    raise typer.Exit(Exit.INVALID)


def explain(
    pod: Annotated[str, typer.Argument(help="The pod, as NAMESPACE/NAME.", show_default=False)],
    policy: Annotated[
        Path | None, typer.Option("--policy", help="The policy the scheduler runs by.")
    ] = None,
    policy_config_map: Annotated[
        str | None,
        typer.Option(
            "--policy-config-map",
            help="Read the policy from this ConfigMap (NAMESPACE/NAME, key policy.yaml), as "
            "the Helm chart installs it; instead of --policy.",
        ),
    ] = None,
    scheduler_name: Annotated[
        str, typer.Option("--scheduler-name", help="The scheduler's name (--name).")
    ] = "gpucarve",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    request_timeout: RequestTimeoutOption = 60.0,
    catalog: CatalogOption = None,
) -> None:
    """Why POD waits: its queue's quota and usage, its turn by fair share, its gang, the
    decision and which filters refused how many nodes, and what would let it run."""
    if "/" not in pod or pod.count("/") != 1 or not all(pod.split("/")):
        _refuse(f"pod {pod!a}", "write it as NAMESPACE/NAME, e.g. research/train-0")
    if not all(_NAME.match(part) and len(part) <= 253 for part in pod.split("/")):
        fix = "names are lowercase letters, digits, '-' and '.' (kubectl get pods -n NS)"
        _refuse(f"pod {pod!a} is no Kubernetes name", fix)
    if (policy is None) == (policy_config_map is None):
        _refuse("which policy?", "pass --policy FILE or --policy-config-map NAMESPACE/NAME")
    client = client_or_exit(kubeconfig, context, request_timeout)
    chosen = _policy(client, policy, policy_config_map, catalog)
    try:
        found = explain_pod(client, chosen, pod, scheduler_name, datetime.now(UTC))
    except NoSuchPod:
        _refuse(f"pod {pod} not found", "check the namespace and name (kubectl get pods -n NS)")
    except ApiError as err:
        api_error_exit(err)
    if as_json:
        e = found.explanation
        doc = {
            "pod": found.pod,
            "lines": list(found.lines),
            "workload": None if e is None else e.workload,
            "state": None if e is None else e.state,
            "reason": None if e is None or e.reason is None else str(e.reason),
            "hints": [] if e is None else list(e.hints),
        }
        typer.echo(json.dumps(doc, indent=2))
        return
    for line in found.lines:
        typer.echo(line)
