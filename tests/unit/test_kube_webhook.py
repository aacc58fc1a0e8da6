"""The webhook's HTTP side, called as an ASGI app: malformed or oversized reviews get a 4xx,
never a server error; a review gets its uid back with the decision."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import pytest

from gpucarve.config.policy_build import load_policy
from gpucarve.webhook.server import MAX_REVIEW_BYTES, app
from tests.paths import BUILTIN

POLICY = load_policy(BUILTIN / "three-teams.yaml").policy


def _post(path: str, body: bytes) -> tuple[int, bytes]:
    sent: list[dict[str, Any]] = []
    chunks = [body[i : i + 65536] for i in range(0, len(body), 65536)] or [b""]

    async def receive() -> dict[str, Any]:
        chunk = chunks.pop(0)
        return {"type": "http.request", "body": chunk, "more_body": bool(chunks)}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": path, "headers": [],
             "query_string": b"", "root_path": "", "scheme": "https",
             "server": ("127.0.0.1", 8443), "http_version": "1.1"}  # fmt: skip
    asyncio.run(app(lambda: POLICY, "gpucarve")(scope, receive, send))
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    return status, b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


@pytest.mark.parametrize(
    "body",
    [b"not json", b"[]", b'{"request": 1}', b'{"request": {"uid": 5}}',
     b'{"request": {"uid": "u", "kind": "Pod"}}', b'{"request": {"uid": "u", "object": []}}',
     b'{"request": {"uid": "u", "object": {"metadata": 3}}}'],
)  # fmt: skip
def test_malformed_reviews_are_400(body: bytes) -> None:
    for path in ("/mutate", "/validate"):
        assert _post(path, body)[0] == 400


def test_an_oversized_review_is_413() -> None:
    assert _post("/validate", b"x" * (MAX_REVIEW_BYTES + 1))[0] == 413


def test_a_review_gets_its_uid_and_patch_back() -> None:
    pod = {
        "metadata": {"name": "p", "namespace": "research"},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }
    review = {"request": {"uid": "abc", "kind": {"kind": "Pod"}, "operation": "CREATE",
                          "namespace": "research", "object": pod}}  # fmt: skip
    status, raw = _post("/mutate", json.dumps(review).encode())
    assert status == 200
    response = json.loads(raw)["response"]
    assert response["uid"] == "abc" and response["allowed"] is True
    patch = json.loads(base64.b64decode(response["patch"]))
    assert {"op": "add", "path": "/spec/schedulerName", "value": "gpucarve"} in patch
