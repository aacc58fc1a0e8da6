"""What every command that talks to a cluster shares: where the configuration is, and API
failures said in one line with the object, the verb and the fix."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.text import Text

from gpucarve.cli.output import Exit, console
from gpucarve.kube.api.auth import ConfigProblem
from gpucarve.kube.api.client import ApiError, Client

KubeconfigOption = Annotated[
    Path | None,
    typer.Option(
        "--kubeconfig",
        help="Kubeconfig (default: $KUBECONFIG, several files joined by ':'; in a pod, its "
        "service account; else ~/.kube/config).",
    ),
]
ContextOption = Annotated[
    str | None, typer.Option("--context", help="Kubeconfig context (default: the current one).")
]


RequestTimeoutOption = Annotated[
    float,
    typer.Option(
        "--request-timeout",
        help="Seconds the whole command may wait on the API server before it gives up.",
        min=1,
        max=3600,
    ),
]


def client_or_exit(
    kubeconfig: Path | None, context: str | None = None, deadline_s: float | None = None
) -> Client:
    """`deadline_s`: a command that ends gives up (one line, exit 2) when the API server has
    not answered everything it asked within this many seconds."""
    try:
        client = Client.from_kubeconfig(kubeconfig, context)
        if deadline_s is not None:
            client.deadline = time.monotonic() + deadline_s
        return client
    except ConfigProblem as exc:
        err = console(stderr=True)
        err.print(Text(f"cannot use the kubeconfig: {exc.what}", style="red"))
        err.print(Text(f"fix: {exc.fix}"))
        raise typer.Exit(Exit.INVALID) from None


def api_fix(exc: ApiError) -> str:
    if exc.status == 401:
        return "the credentials were refused: log in again, or renew the token or certificate"
    if exc.status == 403:
        return (
            "this identity may not do that: grant the rule (the Helm chart's ClusterRole "
            "lists what gpucarve needs), or use another --context"
        )
    if exc.status == 404:
        return "the object or its API is not there: run `gpucarve apply` for the CRDs"
    if exc.status == 0:
        return "check that the API server is up and --kubeconfig points at it"
    return "see the API server's message above"


def api_error_exit(exc: ApiError) -> NoReturn:
    err = console(stderr=True)
    err.print(Text(str(exc), style="red"))
    err.print(Text(f"fix: {api_fix(exc)}"))
    raise typer.Exit(Exit.INVALID) from None
