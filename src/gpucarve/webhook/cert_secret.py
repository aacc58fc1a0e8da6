"""The webhook's certificate, kept by the webhook itself (when cert-manager is not used): the
CA and serving certificate live in one Secret; every replica reads it, issues it when it is
missing and renews it when due (`certs.due`: the last third of its lifetime), writes the
files its TLS server reads, and puts the CA into the webhook configurations' `caBundle`.

Replicas race safely: creating a Secret that another replica created first is a 409, and so
is updating one that changed meanwhile; the loser reads what the winner wrote.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from gpucarve.kube.api.client import ApiError, Client
from gpucarve.webhook.certs import Issued, due, issue, service_names

log = logging.getLogger("gpucarve.webhook")
KEYS = {"ca.crt": "ca_pem", "ca.key": "ca_key_pem", "tls.crt": "cert_pem", "tls.key": "key_pem"}
ADMISSION = "/apis/admissionregistration.k8s.io/v1"


@dataclass
class CertKeeper:
    client: Client
    namespace: str
    secret: str
    service: str
    configurations: Sequence[str]  # "mutating/NAME" or "validating/NAME"
    cert_dir: Path
    clock: Callable[[], datetime]
    days: int = 365

    @property
    def _path(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/secrets/{self.secret}"

    def _issue(self, ca: tuple[bytes, bytes] | None) -> Issued:
        return issue(service_names(self.service, self.namespace), [], self.clock(), self.days, ca)

    def _read(self) -> dict[str, Any] | None:
        try:
            return dict(self.client.get(self._path))
        except ApiError as err:
            if err.status == 404:
                return None
            raise

    def _body(self, issued: Issued, version: str | None = None) -> dict[str, Any]:
        data = {k: base64.b64encode(getattr(issued, attr)).decode() for k, attr in KEYS.items()}
        meta: dict[str, Any] = {"name": self.secret, "namespace": self.namespace,
                                "labels": {"app.kubernetes.io/managed-by": "gpucarve"}}  # fmt: skip
        if version is not None:
            meta["resourceVersion"] = version
        return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                "metadata": meta, "data": data}  # fmt: skip

    def ensure(self) -> bytes:
        """The Secret as it should be, its files written, the caBundles set; the CA."""
        secret = self._read()
        if secret is None:
            try:
                self.client.call(
                    "POST", f"/api/v1/namespaces/{self.namespace}/secrets",
                    self._body(self._issue(None)),
                )  # fmt: skip
                log.info("webhook certificate issued into %s/%s", self.namespace, self.secret)
            except ApiError as err:
                if err.status != 409:
                    raise
            secret = self._read()
            assert secret is not None
        files = {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
        if set(KEYS) - set(files) or due(files["tls.crt"], self.clock()):
            ca = (files["ca.crt"], files["ca.key"]) if "ca.key" in files else None
            renewed = self._issue(ca)
            version = secret["metadata"]["resourceVersion"]
            try:
                self.client.call("PUT", self._path, self._body(renewed, version))
                log.info("webhook certificate renewed in %s/%s", self.namespace, self.secret)
            except ApiError as err:
                if err.status != 409:
                    raise  # another replica renewed it first: read theirs
            secret = self._read()
            assert secret is not None
            files = {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
        self._write(files)
        self._bundle(files["ca.crt"])
        return files["ca.crt"]

    def _write(self, files: dict[str, bytes]) -> None:
        self.cert_dir.mkdir(parents=True, exist_ok=True)
        for name in ("ca.crt", "tls.key", "tls.crt"):  # the certificate last: a pair on reload
            target = self.cert_dir / name
            if target.exists() and target.read_bytes() == files[name]:
                continue
            tmp = self.cert_dir / f".{name}.new"
            tmp.write_bytes(files[name])
            tmp.chmod(0o600)
            tmp.replace(target)

    def _bundle(self, ca: bytes) -> None:
        bundle = base64.b64encode(ca).decode()
        for ref in self.configurations:
            kind, _, name = ref.partition("/")
            path = f"{ADMISSION}/{kind}webhookconfigurations/{name}"
            for attempt in range(5):
                config = self.client.get(path)
                hooks = config.get("webhooks") or []
                if all((h.get("clientConfig") or {}).get("caBundle") == bundle for h in hooks):
                    break
                for h in hooks:
                    h.setdefault("clientConfig", {})["caBundle"] = bundle
                try:
                    self.client.call("PUT", path, config)  # resourceVersion kept
                except ApiError as err:
                    if err.status != 409 or attempt == 4:
                        raise
                    continue  # another replica wrote it meanwhile: look again
                log.info("caBundle set in %s", ref)
                break
