"""`gpucarve webhook`: the admission webhook (serve) and its certificate (certs)."""

from __future__ import annotations

import logging
import signal
import threading
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
import uvicorn
from rich.text import Text

from gpucarve.cli.common import CatalogOption, out_dir_or_exit, policy_or_exit
from gpucarve.cli.kube_options import KubeconfigOption, api_error_exit, client_or_exit
from gpucarve.cli.output import Exit, console
from gpucarve.core.problems import InvalidInput
from gpucarve.kube.api.client import ApiError
from gpucarve.kube.scheduler.policy_reload import PolicyReloader, digest
from gpucarve.webhook.admission import warm
from gpucarve.webhook.cert_secret import CertKeeper
from gpucarve.webhook.certs import issue, service_names
from gpucarve.webhook.server import REVIEW_DEADLINE_S, CertReloader, Settings, Workers
from gpucarve.webhook.server import app as webhook_app

app = typer.Typer(
    rich_markup_mode=None, help="The admission webhook and its certificate.", no_args_is_help=True
)
log = logging.getLogger("gpucarve.webhook")


STARTUP_DEADLINE_S = 60.0  # for the first certificate, from the API server


class FailurePolicy(StrEnum):
    FAIL = "Fail"
    IGNORE = "Ignore"


@app.command("serve")
def serve(
    policy: Annotated[Path, typer.Option("--policy", help="The policy YAML.")],
    cert_dir: Annotated[
        Path, typer.Option("--cert-dir", help="Folder with tls.crt and tls.key (a TLS Secret).")
    ],
    port: Annotated[int, typer.Option("--port", min=1, max=65535)] = 8443,
    host: Annotated[str, typer.Option("--host")] = "0.0.0.0",
    name: Annotated[
        str, typer.Option("--name", help="The schedulerName given to GPU pods.")
    ] = "gpucarve",
    secret: Annotated[
        str | None,
        typer.Option(
            "--secret",
            help="NAMESPACE/NAME: keep the certificate in this Secret (issue, renew when due, "
            "write --cert-dir, set the caBundle of each --configuration); without it, "
            "--cert-dir is read as it is (cert-manager's Secret, mounted).",
        ),
    ] = None,
    service: Annotated[
        str, typer.Option("--service", help="The webhook Service's name (certificate names).")
    ] = "gpucarve-webhook",
    configuration: Annotated[
        list[str] | None,
        typer.Option("--configuration", help="mutating/NAME or validating/NAME (repeat)."),
    ] = None,
    writer: Annotated[
        list[str] | None,
        typer.Option(
            "--writer",
            help="A user that may write and delete gpucarve's device ConfigMaps besides the "
            "control plane (the scheduler's service account; repeat).",
        ),
    ] = None,
    failure_policy: Annotated[
        FailurePolicy,
        typer.Option(
            "--failure-policy",
            help="The GPU pods' hooks' failurePolicy: how a review "
            "not decided by --review-deadline is answered.",
        ),
    ] = FailurePolicy.FAIL,
    other_pods_failure_policy: Annotated[
        FailurePolicy,
        typer.Option(
            "--other-pods-failure-policy", help="The other pods' hook's failurePolicy, likewise."
        ),
    ] = FailurePolicy.IGNORE,
    review_deadline: Annotated[
        float,
        typer.Option(
            "--review-deadline",
            min=0.1,
            max=30.0,
            help="Seconds a review may take, inside the hooks' timeoutSeconds.",
        ),
    ] = REVIEW_DEADLINE_S,
    kubeconfig: KubeconfigOption = None,
    catalog: CatalogOption = None,
) -> None:
    """Serve /mutate and /validate (AdmissionReview v1) over TLS, following the policy file
    and the certificate files as they change."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    read_as = digest(policy)
    current = [policy_or_exit(policy, catalog).policy]
    err = console(stderr=True)
    stop = threading.Event()
    if secret is not None:
        out_dir_or_exit(cert_dir, "--cert-dir")
        _keep_certs(secret, service, configuration or [], cert_dir, kubeconfig, stop)
    try:
        certs = CertReloader(cert_dir / "tls.crt", cert_dir / "tls.key")
    except (OSError, ValueError) as exc:
        err.print(Text(f"--cert-dir {cert_dir}: {exc}", style="red"))
        err.print(Text("fix: write tls.crt and tls.key there (`gpucarve webhook certs`)"))
        raise typer.Exit(Exit.INVALID) from None

    def refused(exc: InvalidInput) -> None:
        log.error("policy %s refused, the previous one stays: %d problem(s)", exc.source,
                  len(exc.problems))  # fmt: skip

    reloader = PolicyReloader(policy, catalog or [], refused, loaded=read_as)

    def follow() -> None:
        while not stop.wait(2.0):
            if (new := reloader.poll()) is not None:
                warm(new)
                current[0] = new
                log.info("policy %s loaded", new.name)

    warm(current[0])
    threading.Thread(target=follow, name="policy reload", daemon=True).start()
    certs.follow(stop)
    config = uvicorn.Config(
        webhook_app(
            lambda: current[0],
            Settings(
                name,
                frozenset(writer or ()),
                failure_policy is FailurePolicy.FAIL,
                other_pods_failure_policy is FailurePolicy.FAIL,
            ),
            Workers(review_deadline),
        ),
        host=host,
        port=port,
        log_level="warning",
        ssl_context_factory=lambda _cfg, _default: certs.context,
    )
    server = uvicorn.Server(config)
    signal.signal(signal.SIGTERM, lambda *_: setattr(server, "should_exit", True))
    try:
        server.run()
    finally:
        stop.set()


def _keep_certs(
    secret: str,
    service: str,
    configurations: list[str],
    cert_dir: Path,
    kubeconfig: Path | None,
    stop: threading.Event,
    every_s: float = 60.0,
) -> None:
    """The certificate made right once (or exit), then looked at every minute."""
    ns, _, name = secret.partition("/")
    bad = [c for c in configurations if c.partition("/")[0] not in ("mutating", "validating")]
    if not ns or not name or bad:
        err = console(stderr=True)
        what = f"--secret {secret!r}" if not (ns and name) else f"--configuration {bad[0]!r}"
        err.print(Text(f"{what}: expected NAMESPACE/NAME, mutating/NAME or validating/NAME",
                       style="red"))  # fmt: skip
        raise typer.Exit(Exit.INVALID)
    # the first certificate within a deadline (or exit with the reason): a server that never
    # answers must not leave the pod starting for ever; the renewals after it have none
    client = client_or_exit(kubeconfig, deadline_s=STARTUP_DEADLINE_S)
    keeper = CertKeeper(client, ns, name, service, configurations, cert_dir,
                        lambda: datetime.now(UTC))  # fmt: skip
    try:
        keeper.ensure()
    except ApiError as exc:
        api_error_exit(exc)
    client.deadline = None

    def loop() -> None:
        while not stop.wait(every_s):
            try:
                keeper.ensure()
            except ApiError as exc:
                log.warning("webhook certificate not checked: %s", exc)

    threading.Thread(target=loop, name="cert keeper", daemon=True).start()


@app.command("certs")
def certs_cmd(
    out: Annotated[Path, typer.Option("--out", help="Folder for ca.crt, tls.crt, tls.key.")],
    service: Annotated[str, typer.Option("--service", help="The webhook Service's name.")] = (
        "gpucarve-webhook"
    ),
    namespace: Annotated[str, typer.Option("--namespace")] = "gpucarve-system",
    ip: Annotated[list[str] | None, typer.Option("--ip", help="An IP the cert is for too.")] = None,
    days: Annotated[int, typer.Option("--days", min=1, max=3650)] = 365,
    new_ca: Annotated[
        bool, typer.Option("--new-ca", help="Make a new CA even if --out holds one.")
    ] = False,
) -> None:
    """Make a serving certificate for the webhook Service, signed by the CA in --out (a
    rotation: the webhook configurations' caBundle, ca.crt, stays valid) or by a new one."""
    out_dir_or_exit(out, "--out")
    ca = None
    if not new_ca and (out / "ca.crt").is_file() and (out / "ca.key").is_file():
        ca = ((out / "ca.crt").read_bytes(), (out / "ca.key").read_bytes())
    try:
        issued = issue(service_names(service, namespace), ip or [], datetime.now(UTC), days, ca)
    except ValueError as exc:
        console(stderr=True).print(Text(f"cannot issue the certificate: {exc}", style="red"))
        console(stderr=True).print(Text("fix: check --ip, or pass --new-ca"))
        raise typer.Exit(Exit.INVALID) from None
    issued.write(out)
    console().print(f"{out}/ca.crt, tls.crt, tls.key: valid until {issued.not_after:%Y-%m-%d}")
