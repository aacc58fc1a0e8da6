"""The webhook's HTTP side, called as an ASGI app: malformed or oversized reviews get a 4xx,
never a server error; a review gets its uid back with the decision."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import pytest

from gpucarve.config.policy_build import load_policy
from gpucarve.core.policy import Policy
from gpucarve.webhook.server import MAX_REVIEW_BYTES, Settings, app
from tests.paths import BUILTIN, EXAMPLES

POLICY = load_policy(BUILTIN / "three-teams.yaml").policy
DRA = load_policy(EXAMPLES / "dra" / "policy.yaml").policy


def _post(path: str, body: bytes, policy: Policy = POLICY) -> tuple[int, bytes]:
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
    asyncio.run(app(lambda: policy, Settings())(scope, receive, send))
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


def _review_of(obj: Any, kind: str = "Pod", operation: str = "CREATE", **extra: Any) -> bytes:
    req = {"uid": "u1", "kind": {"kind": kind}, "operation": operation,
           "namespace": "research", "object": obj, **extra}  # fmt: skip
    return json.dumps({"request": req}).encode()


def _deep_review(depth: int) -> bytes:
    """A review whose pod spec nests `depth` levels (past what json can encode back)."""
    spec = '{"a":[' * depth + '"x"' + "]}" * depth
    head = '{"request": {"uid": "u1", "kind": {"kind": "Pod"}, "operation": "CREATE", '
    return (head + '"object": {"metadata": {"name": "p"}, "spec": ' + spec + "}}}").encode()


@pytest.mark.parametrize(
    "body",
    [
        # a lone surrogate in the uid, and nesting past the recursion limit
        b'{"request": {"uid": "\\ud800", "kind": {"kind": "Pod"}, "object": {}}}',
        _deep_review(100),
        _deep_review(50_000),
    ],
)
def test_hostile_reviews_are_400(body: bytes) -> None:
    for path in ("/mutate", "/validate"):
        assert _post(path, body)[0] == 400


SHAPES: list[Any] = [
    {"metadata": {"name": "p", "annotations": []}},
    {"metadata": {"name": "p"}, "spec": {"containers": "x"}},
    {"metadata": {"name": "p"}, "spec": {"containers": [{"resources": []}]}},
    {"metadata": {"name": "p"}, "spec": {"containers": [{"resources": {"limits": "9"}}]}},
    {"metadata": {"name": "p", "labels": {"gpucarve.io/queue": ["a"]}},
     "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}]}},
    {"metadata": {"name": "p\ud800"},
     "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "x"}}}]}},
    {"metadata": {"name": "q"}, "spec": {"quota": {"h100-full": [1]}, "cohort": 5}},
    {"metadata": {"name": "q"}, "spec": []},
]  # fmt: skip


@pytest.mark.parametrize("obj", SHAPES)
@pytest.mark.parametrize("kind", ["Pod", "Queue", "PodGroup"])
def test_objects_of_unexpected_shapes_are_decided_never_a_server_error(obj: Any, kind: str) -> None:
    req = {"uid": "u1", "kind": {"kind": kind}, "operation": "CREATE",
           "namespace": "research", "object": obj}  # fmt: skip
    body = json.dumps({"request": req}, ensure_ascii=True)
    for path in ("/mutate", "/validate"):
        status, raw = _post(path, body.encode())
        assert status == 200, (path, raw[:300])
        assert json.loads(raw)["response"]["uid"] == "u1"


def test_a_pod_update_changing_an_owned_annotation_is_denied() -> None:
    old = {"metadata": {"name": "p", "annotations": {}}}
    new = {"metadata": {"name": "p", "annotations": {"gpucarve.io/assignment": "{}"}}}
    status, raw = _post("/validate", _review_of(new, operation="UPDATE", oldObject=old))
    assert status == 200
    response = json.loads(raw)["response"]
    assert (
        response["allowed"] is False and "gpucarve.io/assignment" in response["status"]["message"]
    )
    status, raw = _post("/validate", _review_of(old, operation="UPDATE", oldObject=old))
    assert json.loads(raw)["response"]["allowed"] is True


CLAIM_SHAPES: list[Any] = [
    {"metadata": {"name": "c"}, "spec": {"devices": {"requests": "x"}}},
    {"metadata": {"name": "c"}, "spec": {"devices": {"requests": [{"exactly": []}]}}},
    {"metadata": {"name": "c"}, "spec": {"devices": {"requests": [
        {"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": "two"}}]}}},
    {"metadata": {"name": "c"}, "spec": {"devices": {"requests": [
        {"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com", "selectors": [5]}}]}}},
    {"metadata": {"name": "c"}, "spec": {"spec": {"devices": {"requests": [
        {"name": "g", "firstAvailable": "gpu.nvidia.com"}]}}}},
    {"metadata": {"name": "c"}, "spec": []},
]  # fmt: skip


@pytest.mark.parametrize("obj", CLAIM_SHAPES)
@pytest.mark.parametrize("kind", ["ResourceClaim", "ResourceClaimTemplate"])
def test_claims_of_unexpected_shapes_are_decided_never_a_server_error(obj: Any, kind: str) -> None:
    status, raw = _post("/validate", _review_of(obj, kind=kind), DRA)
    assert status == 200, raw[:300]
    assert json.loads(raw)["response"]["uid"] == "u1"


def test_a_claim_no_device_could_serve_is_denied_at_creation_only() -> None:
    b200 = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA B200"'
    claim = {"metadata": {"name": "c"}, "spec": {"devices": {"requests": [
        {"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com",
                                  "selectors": [{"cel": {"expression": b200}}]}}]}}}  # fmt: skip
    status, raw = _post("/validate", _review_of(claim, kind="ResourceClaim"), DRA)
    response = json.loads(raw)["response"]
    assert status == 200 and response["allowed"] is False
    assert "NVIDIA B200" in response["status"]["message"]
    # a claim's spec cannot change: its updates (finalizers) are never refused
    update = _review_of(claim, kind="ResourceClaim", operation="UPDATE", oldObject=claim)
    assert json.loads(_post("/validate", update, DRA)[1])["response"]["allowed"] is True


def test_a_selector_only_the_clusters_own_labels_could_satisfy_is_admitted_with_a_warning() -> None:
    def pod(selector: dict[str, str]) -> dict[str, Any]:
        limits = {"nvidia.com/gpu": "1"}
        container = {"name": "c", "resources": {"limits": limits}}
        spec = {"nodeSelector": selector, "containers": [container]}
        return {"metadata": {"name": "p", "namespace": "research"}, "spec": spec}

    _, raw = _post("/validate", _review_of(pod({"kubernetes.io/hostname": "gpu-7"})))
    response = json.loads(raw)["response"]
    assert response["allowed"] is True and "warnings" not in response
    _, raw = _post("/validate", _review_of(pod({"nvidia.com/gpu.prodcut": "x"})))
    response = json.loads(raw)["response"]
    assert response["allowed"] is True
    (warning,) = response["warnings"]
    assert "did you mean nvidia.com/gpu.product?" in warning
    _, raw = _post("/validate", _review_of(pod({"nvidia.com/gpu.product": "Tesla-T4"})))
    response = json.loads(raw)["response"]
    assert response["allowed"] is False and "can never be admitted" in response["status"]["message"]


def test_a_job_whose_gang_could_never_run_is_denied_at_creation() -> None:
    template = {"spec": {"containers": [
        {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}  # fmt: skip
    job = {"metadata": {"name": "sweep", "namespace": "research"},
           "spec": {"parallelism": 40, "completions": 40, "template": template}}  # fmt: skip
    _, raw = _post("/validate", _review_of(job, kind="Job"))
    response = json.loads(raw)["response"]
    assert response["allowed"] is False, response
    assert "its 40 pods run all at once" in response["status"]["message"]
    job["spec"]["parallelism"] = job["spec"]["completions"] = 4
    _, raw = _post("/validate", _review_of(job, kind="Job"))
    assert json.loads(raw)["response"]["allowed"] is True


def test_reviews_are_worked_out_a_few_at_once_and_health_is_answered_meanwhile() -> None:
    """Many large reviews at once queue for the workers instead of all holding the
    interpreter's lock: the decisions never run more than DECISIONS_AT_ONCE at a time, and
    /healthz is answered while they wait."""
    from gpucarve.webhook.server import DECISIONS_AT_ONCE, Workers

    work = Workers(deadline_s=60.0)
    served = app(lambda: POLICY, Settings(), work)
    pod = {"metadata": {"name": "p", "namespace": "research"}, "spec": {"containers": [
        {"name": f"c{i}", "resources": {"limits": {"nvidia.com/gpu": "1"}}} for i in range(50)
    ]}}  # fmt: skip
    body = _review_of(pod)

    async def call(path: str, data: bytes) -> int:
        status, _ = await _call(served, path, data)
        return int(status)

    async def burst() -> list[int]:
        reviews = [call("/validate", body) for _ in range(30)]
        return list(await asyncio.gather(*reviews, call("/healthz", b"")))

    statuses = asyncio.run(burst())
    assert statuses == [200] * 31
    assert 1 <= work.most <= DECISIONS_AT_ONCE < 30, work.most  # fewer than came at once


def _call(served: Any, path: str, data: bytes) -> Any:
    """One ASGI request to `served`, as a coroutine: (status, body)."""

    async def go() -> tuple[int, bytes]:
        sent: list[dict[str, Any]] = []
        chunks = [data]

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": chunks.pop(0) if chunks else b"",
                    "more_body": False}  # fmt: skip

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        scope = {"type": "http", "method": "POST" if data else "GET", "path": path,
                 "headers": [], "query_string": b"", "root_path": "", "scheme": "https",
                 "server": ("127.0.0.1", 8443), "http_version": "1.1"}  # fmt: skip
        await served(scope, receive, send)
        status = next(m["status"] for m in sent if m["type"] == "http.response.start")
        return int(status), b"".join(m.get("body", b"") for m in sent
                                     if m["type"] == "http.response.body")  # fmt: skip

    return go()


@pytest.mark.parametrize("fail_closed", [True, False], ids=["Fail", "Ignore"])
def test_a_review_past_its_deadline_is_answered_as_its_failure_policy_says(
    monkeypatch: pytest.MonkeyPatch, fail_closed: bool
) -> None:
    """Decisions that outlast the deadline (held here by an event the test sets afterwards)
    are answered in time, refused with the reason and fix under Fail, admitted with a warning
    under Ignore; /healthz is answered meanwhile, and the abandoned decisions never run more
    than DECISIONS_AT_ONCE at once."""
    import threading

    from gpucarve.webhook import server
    from gpucarve.webhook.server import DECISIONS_AT_ONCE, Workers

    release = threading.Event()
    real = server._validate

    def stuck(*args: Any) -> Any:
        release.wait(10)
        return real(*args)

    monkeypatch.setattr(server, "_validate", stuck)
    work = Workers(deadline_s=0.3)
    served = app(lambda: POLICY, Settings(fail_closed=fail_closed), work)
    pod = {"metadata": {"name": "p", "namespace": "research"}, "spec": {"containers": [
        {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}  # fmt: skip

    async def burst() -> list[tuple[int, bytes]]:
        answers = await asyncio.gather(
            *[_call(served, "/validate", _review_of(pod)) for _ in range(5)],
            _call(served, "/healthz", b""),
        )
        release.set()
        return list(answers)

    *reviews, health = asyncio.run(burst())
    assert health[0] == 200
    for status, raw in reviews:
        assert status == 200, raw
        response = json.loads(raw)["response"]
        assert response["allowed"] is not fail_closed, response
        said = response["status"]["message"] if fail_closed else response["warnings"][0]
        assert "did not decide this Pod within 0.3 s" in said, said
        if fail_closed:
            assert "fix: try again" in said, said
    assert work.most <= DECISIONS_AT_ONCE


def test_a_cpu_pod_past_its_deadline_follows_the_other_pods_policy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gpucarve.webhook import server
    from gpucarve.webhook.server import Workers

    monkeypatch.setattr(server, "_validate", lambda *a: __import__("time").sleep(0.5))
    cpu = {"metadata": {"name": "p", "namespace": "research"},
           "spec": {"containers": [{"name": "c"}]}}  # fmt: skip
    for closed in (False, True):
        served = app(lambda: POLICY, Settings(other_pods_fail_closed=closed), Workers(0.1))
        status, raw = asyncio.run(_call(served, "/validate", _review_of(cpu)))
        assert status == 200 and json.loads(raw)["response"]["allowed"] is not closed, raw
