"""The webhook keeping its own certificate on the real API server: issued into a Secret when
missing, the caBundle set in both webhook configurations, renewed (same CA) when due, and two
replicas starting at once agree on one certificate."""

from __future__ import annotations

import base64
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gpucarve.devcluster.stack import LocalStack
from gpucarve.kube.api.client import Client
from gpucarve.webhook.cert_secret import ADMISSION, CertKeeper
from tests.integration.api import Api
from tests.integration.chart import ensure_namespace

pytestmark = pytest.mark.integration
NS = "gpucarve-certs"


def _configurations(admin: Api, suffix: str) -> list[str]:
    hook = {
        "clientConfig": {"url": "https://127.0.0.1:1/never"},
        # a rule nothing matches: the API server never calls it
        "rules": [{"apiGroups": ["example.com"], "apiVersions": ["v1"],
                   "operations": ["DELETE"], "resources": ["nothing"]}],
        "sideEffects": "None", "admissionReviewVersions": ["v1"],
    }  # fmt: skip
    refs = []
    for kind in ("mutating", "validating"):
        name = f"gpucarve-{suffix}"
        body = {"metadata": {"name": name}, "webhooks": [{**hook, "name": f"{kind}.gpucarve.io"}]}
        admin.create(f"{ADMISSION}/{kind}webhookconfigurations", body)
        refs.append(f"{kind}/{name}")
    return refs


def _bundles(admin: Api, refs: list[str]) -> set[str]:
    out = set()
    for ref in refs:
        kind, _, name = ref.partition("/")
        config: dict[str, Any] = admin.get(f"{ADMISSION}/{kind}webhookconfigurations/{name}")
        out |= {h["clientConfig"].get("caBundle", "") for h in config["webhooks"]}
    return out


def test_issued_bundled_renewed_with_the_same_ca(
    stack: LocalStack, admin: Api, tmp_path: Path
) -> None:
    ensure_namespace(admin, NS)
    refs = _configurations(admin, "one")
    now = [datetime(2026, 12, 1, tzinfo=UTC)]
    keeper = CertKeeper(Client.from_kubeconfig(stack.kubeconfig()), NS, "webhook-tls",
                        "gpucarve-webhook", refs, tmp_path, lambda: now[0], days=30)  # fmt: skip
    ca = keeper.ensure()
    secret = admin.get(f"/api/v1/namespaces/{NS}/secrets/webhook-tls")
    assert secret["type"] == "kubernetes.io/tls"
    assert set(secret["data"]) == {"ca.crt", "ca.key", "tls.crt", "tls.key"}
    assert _bundles(admin, refs) == {base64.b64encode(ca).decode()}
    first = (tmp_path / "tls.crt").read_bytes()
    assert first == base64.b64decode(secret["data"]["tls.crt"])
    version = secret["metadata"]["resourceVersion"]
    keeper.ensure()  # nothing due: nothing written
    assert admin.get(f"/api/v1/namespaces/{NS}/secrets/webhook-tls")["metadata"][
        "resourceVersion"] == version  # fmt: skip
    now[0] += timedelta(days=21)  # inside the last third of 30 days
    assert keeper.ensure() == ca, "a renewal keeps the CA (the caBundle stays right)"
    renewed = (tmp_path / "tls.crt").read_bytes()
    assert renewed != first
    assert _bundles(admin, refs) == {base64.b64encode(ca).decode()}


def test_two_replicas_starting_at_once_agree(stack: LocalStack, admin: Api, tmp_path: Path) -> None:
    ensure_namespace(admin, NS)
    refs = _configurations(admin, "two")
    keepers = [
        CertKeeper(
            Client.from_kubeconfig(stack.kubeconfig()),
            NS,
            "race-tls",
            "gpucarve-webhook",
            refs,
            tmp_path / str(i),
            lambda: datetime.now(UTC),
        )
        for i in range(2)
    ]
    errors: list[BaseException] = []

    def go(k: CertKeeper) -> None:
        try:
            k.ensure()
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=go, args=(k,)) for k in keepers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == []
    assert (tmp_path / "0" / "tls.crt").read_bytes() == (tmp_path / "1" / "tls.crt").read_bytes()
    assert len(_bundles(admin, refs)) == 1
