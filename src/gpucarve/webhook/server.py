"""The admission webhook's HTTP side: AdmissionReview v1 in, a decision out (Starlette on
uvicorn, TLS). `/mutate` returns the pod's JSON patch; `/validate` allows or denies pods and
Queues with the scheduler's own checks (`admission`), and pod updates that would change what
the scheduler acts on (`bypass.owned_changes`). The serving certificate is read
again when its files change, into the same TLS context: new connections get the new one and
no request in flight is dropped.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import ssl
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from gpucarve.core.policy import Policy
from gpucarve.webhook.admission import (
    denial,
    device_env_problems,
    governed,
    mutate,
    pod_group_problems,
    pod_problems,
    queue_problems,
)
from gpucarve.webhook.bypass import owned_changes

log = logging.getLogger("gpucarve.webhook")
MAX_REVIEW_BYTES = 3 * 1024 * 1024  # the API server's own limit on a request body


def _review(uid: str, allowed: bool, message: str = "", patch: list[Any] | None = None) -> Any:
    response: dict[str, Any] = {"uid": uid, "allowed": allowed}
    if not allowed:
        response["status"] = {"code": 403, "reason": "Forbidden", "message": message}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


async def _read(request: Request) -> dict[str, Any] | Response:
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_REVIEW_BYTES:
            return Response("review too large", status_code=413)
    try:
        req = json.loads(body)["request"]
    except (ValueError, KeyError, TypeError):
        req = None
    shape_ok = (
        isinstance(req, dict)
        and isinstance(req.get("uid"), str)
        and isinstance(req.get("kind", {}), dict)
        and isinstance(req.get("object") if req.get("object") is not None else {}, dict)
        and isinstance((req.get("object") or {}).get("metadata") or {}, dict)
    )
    if not shape_ok:
        return Response("not an AdmissionReview v1 (request.uid, .kind, .object)", 400)
    assert isinstance(req, dict)
    return req


def app(policy: Callable[[], Policy], scheduler_name: str) -> Starlette:
    """`policy` gives the current one (the server follows the same file as the scheduler)."""

    async def do_mutate(request: Request) -> Response:
        req = await _read(request)
        if isinstance(req, Response):
            return req
        obj = req.get("object") or {}
        if req.get("kind", {}).get("kind") != "Pod" or req.get("operation") != "CREATE":
            return JSONResponse(_review(req["uid"], True))
        obj.setdefault("metadata", {}).setdefault("namespace", req.get("namespace"))
        m = mutate(policy(), obj, scheduler_name, req["uid"])
        if m.changes:
            log.info("pod %s/%s: %s", req.get("namespace"), obj["metadata"].get("name") or
                     obj["metadata"].get("generateName"), "; ".join(m.changes))  # fmt: skip
        return JSONResponse(_review(req["uid"], True, patch=m.patch))

    async def do_validate(request: Request) -> Response:
        req = await _read(request)
        if isinstance(req, Response):
            return req
        obj = req.get("object") or {}
        kind = req.get("kind", {}).get("kind")
        if kind == "Pod" and req.get("operation") == "CREATE":
            obj.setdefault("metadata", {}).setdefault("namespace", req.get("namespace"))
            problems = pod_problems(policy(), obj, scheduler_name)
        elif kind == "Pod" and req.get("operation") == "UPDATE" and not req.get("subResource"):
            # only a change to what the scheduler acts on is refused (webhook/bypass.py)
            old = req.get("oldObject")
            problems = owned_changes(old, obj) if isinstance(old, dict) else []
        elif kind == "Pod" and req.get("subResource") == "ephemeralcontainers":
            # `kubectl debug` adds containers to a running pod: the same device rule holds
            ns = str(req.get("namespace") or "")
            problems = device_env_problems(obj) if governed(policy(), ns) else []
        elif kind == "Queue" and req.get("operation") in ("CREATE", "UPDATE"):
            problems = queue_problems(policy(), obj)
        elif kind == "PodGroup" and req.get("operation") in ("CREATE", "UPDATE"):
            obj.setdefault("metadata", {}).setdefault("namespace", req.get("namespace"))
            problems = pod_group_problems(policy(), obj)
        else:
            problems = []
        if problems:
            return JSONResponse(_review(req["uid"], False, denial(problems)))
        return JSONResponse(_review(req["uid"], True))

    async def healthz(_: Request) -> Response:
        return JSONResponse({"ok": True})

    return Starlette(
        routes=[
            Route("/mutate", do_mutate, methods=["POST"]),
            Route("/validate", do_validate, methods=["POST"]),
            Route("/healthz", healthz),
        ]
    )


class CertReloader:
    """One TLS context whose certificate is loaded again when the files change."""

    def __init__(self, cert: Path, key: Path) -> None:
        self.cert, self.key = cert, key
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._seen: tuple[float, float] | None = None
        self.reloads = 0
        self.reload()

    def _stamp(self) -> tuple[float, float]:
        return (os.stat(self.cert).st_mtime, os.stat(self.key).st_mtime)

    def reload(self) -> bool:
        try:
            stamp = self._stamp()
            if stamp == self._seen:
                return False
            self.context.load_cert_chain(self.cert, self.key)
        except (OSError, ssl.SSLError) as exc:
            if self._seen is None:
                raise
            log.warning("serving certificate not reloaded (the old one stays): %s", exc)
            return False
        self._seen = stamp
        self.reloads += 1
        return True

    def follow(self, stop: threading.Event, every_s: float = 1.0) -> threading.Thread:
        def loop() -> None:
            while not stop.wait(every_s):
                if self.reload():
                    log.info("serving certificate reloaded from %s", self.cert)

        t = threading.Thread(target=loop, name="cert reload", daemon=True)
        t.start()
        return t
