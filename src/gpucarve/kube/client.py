"""A small Kubernetes REST client: kubeconfig (token or client certificate), JSON calls,
server-side apply. Enough for `gpucarve apply`; errors say which call failed and why."""

from __future__ import annotations

import base64
import json
import os
import ssl
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

FIELD_MANAGER = "gpucarve"


class ApiError(RuntimeError):
    def __init__(self, method: str, path: str, status: int, message: str) -> None:
        super().__init__(f"{method} {path}: {status} {message}")
        self.status = status


@dataclass
class Client:
    server: str
    context: ssl.SSLContext
    headers: dict[str, str]

    @classmethod
    def from_kubeconfig(cls, path: str | Path | None = None) -> Client:
        path = Path(path or os.environ.get("KUBECONFIG") or Path.home() / ".kube" / "config")
        doc = yaml.safe_load(path.read_text())
        ctx_name = doc.get("current-context")
        ctx = next(c["context"] for c in doc["contexts"] if c["name"] == ctx_name)
        cluster = next(c["cluster"] for c in doc["clusters"] if c["name"] == ctx["cluster"])
        user = next(u["user"] for u in doc["users"] if u["name"] == ctx["user"])
        context = ssl.create_default_context()
        if cluster.get("insecure-skip-tls-verify"):
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        elif "certificate-authority-data" in cluster:
            context.load_verify_locations(
                cadata=base64.b64decode(cluster["certificate-authority-data"]).decode()
            )
        elif "certificate-authority" in cluster:
            context.load_verify_locations(cafile=cluster["certificate-authority"])
        headers = {}
        if "token" in user:
            headers["Authorization"] = f"Bearer {user['token']}"
        if "client-certificate-data" in user:
            with tempfile.TemporaryDirectory() as d:
                cert, key = Path(d) / "c.pem", Path(d) / "k.pem"
                cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
                key.write_bytes(base64.b64decode(user["client-key-data"]))
                context.load_cert_chain(cert, key)
        return cls(cluster["server"].rstrip("/"), context, headers)

    def call(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> Any:
        data = None
        if body is not None:
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        req = urllib.request.Request(
            self.server + path,
            data=data,
            method=method,
            headers={**self.headers, "Content-Type": content_type, "Accept": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, context=self.context, timeout=30) as reply:
                raw = reply.read()
        except urllib.error.HTTPError as err:
            raw = err.read()
            try:
                message = json.loads(raw).get("message", "")
            except ValueError:
                message = raw[:300].decode(errors="replace")
            raise ApiError(method, path, err.code, message) from None
        except urllib.error.URLError as err:
            raise ApiError(method, path, 0, f"cannot reach {self.server}: {err.reason}") from None
        return json.loads(raw) if raw else None

    def get(self, path: str) -> Any:
        return self.call("GET", path)

    def apply(self, path: str, obj: dict[str, Any]) -> Any:
        """Server-side apply of `obj` at its object path (created or updated)."""
        return self.call(
            "PATCH",
            f"{path}?fieldManager={FIELD_MANAGER}&force=true",
            obj,
            "application/apply-patch+yaml",
        )


def object_path(obj: dict[str, Any]) -> str:
    """The REST path of a cluster-scoped object of the kinds gpucarve applies."""
    api, kind, name = obj["apiVersion"], obj["kind"], obj["metadata"]["name"]
    plural = {
        "CustomResourceDefinition": "customresourcedefinitions",
        "PriorityClass": "priorityclasses",
        "Queue": "queues",
    }[kind]
    prefix = "/api/v1" if api == "v1" else f"/apis/{api}"
    return f"{prefix}/{plural}/{name}"
