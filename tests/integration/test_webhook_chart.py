"""The chart's webhook on the real API server: its objects are accepted; its Deployment's
container arguments, run as a host process with the pod's environment (the webhook
ServiceAccount's token), keep the certificate through the chart's RBAC (the Secret issued,
the caBundle set in both configurations) and serve it for the Service's DNS name. (The
API server's route to the Service needs a pod network this environment has not: the review
path itself is tested in test_webhook.py.)"""

from __future__ import annotations

import base64
import signal
import socket
import ssl
from pathlib import Path
from typing import Any

import pytest

from gpucarve.devcluster.procs import free_port
from gpucarve.devcluster.stack import ADMIN_USER, LocalStack, find_binaries
from tests.integration.api import Api, wait_for
from tests.integration.chart import NAMESPACE, install, render
from tests.integration.pod_env import (
    container_args,
    pod_environment,
    service_account_dir,
    start_scheduler,
    token,
)
from tests.integration.stack_setup import populate
from tests.paths import BUILTIN

pytestmark = pytest.mark.integration
POLICY = BUILTIN / "three-teams.yaml"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"


def _bundles(admin: Api) -> set[str]:
    out = set()
    for kind in ("mutating", "validating"):
        config: dict[str, Any] = admin.get(f"{ADMISSION}/{kind}webhookconfigurations/gpucarve")
        out |= {(h["clientConfig"].get("caBundle") or "") for h in config["webhooks"]}
    return out


def _handshake(port: int, ca: bytes, name: str) -> bool:
    ctx = ssl.create_default_context(cadata=ca.decode())
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=3) as raw,
            ctx.wrap_socket(raw, server_hostname=name),
        ):
            return True
    except OSError:
        return False


def test_the_chart_webhook_keeps_its_certificate_with_its_own_rights(tmp_path: Path) -> None:
    objs = render(POLICY)
    kinds = {o["kind"] for o in objs}
    assert {"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "Service"} <= kinds
    off = {"webhook": "the chart's own webhook and its configurations are installed here"}
    with LocalStack(find_binaries(), tmp_path / "stack", off=off) as stack:
        admin = Api(stack.server, stack.tokens[ADMIN_USER])
        populate(stack, admin, POLICY, ["research"])
        install(admin, objs, [NAMESPACE, "gpu-operator"])
        (dep,) = [o for o in objs if o["kind"] == "Deployment"
                  and o["metadata"]["name"] == "gpucarve-webhook"]  # fmt: skip
        webhook_token = token(admin, service_account="gpucarve-webhook")
        sa = service_account_dir(tmp_path / "sa", stack, webhook_token)
        env = pod_environment(stack, sa, "gpucarve-webhook-0", tmp_path)
        port = free_port()
        policy_dir = tmp_path / "policy"
        policy_dir.mkdir()
        (policy_dir / "policy.yaml").write_text(POLICY.read_text())
        args = container_args(dep, env, policy=str(policy_dir / "policy.yaml"), port=str(port),
                              cert_dir=str(tmp_path / "certs"))  # fmt: skip
        assert "--secret=gpucarve-system/gpucarve-webhook-tls" in args
        proc = start_scheduler(args, env, tmp_path / "webhook.log")
        try:
            secret_path = f"/api/v1/namespaces/{NAMESPACE}/secrets/gpucarve-webhook-tls"

            def issued() -> dict[str, Any] | None:
                status, body = admin.call("GET", secret_path)
                return body if status == 200 else None

            secret = wait_for(issued, what="the certificate Secret")
            ca = base64.b64decode(secret["data"]["ca.crt"])
            wait_for(lambda: _bundles(admin) == {base64.b64encode(ca).decode()},
                     what="the caBundle in both configurations")  # fmt: skip
            name = f"gpucarve-webhook.{NAMESPACE}.svc"
            assert wait_for(lambda: _handshake(port, ca, name), what="TLS for the Service name")
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(15)
        log = (tmp_path / "webhook.log").read_text()
        assert "Traceback" not in log, log
        assert "forbidden" not in log, log


def _comparable(config: dict[str, Any]) -> list[dict[str, Any]]:
    """A webhook configuration's hooks without where they are served (a Service in the chart,
    a URL in the dev cluster) and without how the namespace list is ordered."""
    out = []
    for h in config["webhooks"]:
        h = {k: v for k, v in h.items() if k != "clientConfig"}
        for expr in (h.get("namespaceSelector") or {}).get("matchExpressions") or []:
            expr["values"] = sorted(expr["values"])
        out.append(h)
    return sorted(out, key=lambda h: h["name"])


def test_the_stacks_webhook_configurations_are_the_charts() -> None:
    """The dev cluster and every integration stack install the hooks the chart renders, the
    pod-update hook and its CEL condition included: the stack tested is the stack shipped."""
    from gpucarve.devcluster.webhook import configurations, governed_namespaces

    objs = render(POLICY)
    chart = {o["kind"]: o for o in objs if o["kind"].endswith("WebhookConfiguration")}
    ours = dict(configurations("https://127.0.0.1:1", b"ca", governed_namespaces(POLICY)))
    assert _comparable(ours["mutatingwebhookconfigurations"]) == _comparable(
        chart["MutatingWebhookConfiguration"]
    )
    assert _comparable(ours["validatingwebhookconfigurations"]) == _comparable(
        chart["ValidatingWebhookConfiguration"]
    )
