"""The admission webhook on a real API server with a policy of DRA pools: a ResourceClaim or
ResourceClaimTemplate for GPUs that no device of the policy could ever serve (a selector that
matches nothing, more GPUs than any node has, alternatives gpucarve does not choose among) is
refused when it is written, with the field and the fix; claims that can run, claims of other
drivers and claims outside the governed namespaces are created."""

from __future__ import annotations

import base64
import json
import ssl
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from gpucarve.devcluster.stack import ADMIN_USER, LocalStack, find_binaries
from tests.integration.api import Api, wait_for
from tests.integration.stack_setup import populate
from tests.paths import EXAMPLES

pytestmark = pytest.mark.integration
POLICY = EXAMPLES / "dra" / "policy.yaml"
GOVERNED = ["research", "production"]
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims"
TEMPLATES = "/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaimtemplates"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    work = tmp_path_factory.mktemp("dra-webhook")
    with LocalStack(find_binaries(), work / "stack", POLICY) as stack:
        admin = Api(stack.server, stack.tokens[ADMIN_USER])
        populate(stack, admin, POLICY, [*GOVERNED, "elsewhere"])
        yield admin


def _claim(name: str, ns: str, cls: str, count: int = 1, *selectors: str) -> dict[str, Any]:
    sel = [{"cel": {"expression": e}} for e in selectors]
    spec = {
        "devices": {
            "requests": [
                {
                    "name": "gpu",
                    "exactly": {"deviceClassName": cls, "count": count, "selectors": sel},
                }
            ]
        }
    }
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": ns}, "spec": spec}  # fmt: skip


def _post(api: Api, path: str, obj: dict[str, Any]) -> tuple[int, Any]:
    return api.call("POST", path.format(ns=obj["metadata"]["namespace"]), obj)


def test_gpu_claims_no_device_could_serve_are_refused_when_written(api: Api) -> None:
    b200 = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA B200"'
    refused = _claim("b200", "research", "gpu.nvidia.com", 1, b200)

    # the API server may need a moment before it calls a newly registered webhook
    def denied() -> Any:
        status, body = _post(api, CLAIMS + "?dryRun=All", refused)
        return body if status == 403 else None

    body = wait_for(denied, what="the webhook refusing the claim")
    message = body["message"]
    assert "claims.validate.gpucarve.io" in message and "NVIDIA B200" in message, message
    assert "b200.spec.devices.requests[0].exactly.selectors" in message, message
    # a template asking more GPUs than any node has: its claims could never be allocated
    too_many = _claim("sixteen", "research", "gpu.nvidia.com", 16)
    template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                "metadata": {"name": "sixteen", "namespace": "research"},
                "spec": {"spec": too_many["spec"]}}  # fmt: skip
    status, body = _post(api, TEMPLATES, template)
    assert status == 403 and "no node has more than 8" in body["message"], body
    # what can run, other drivers' claims and claims outside the governed namespaces pass
    for ok in (
        _claim("four", "research", "gpu.nvidia.com", 4),
        _claim("nics", "research", "nic.example.com", 16),
        _claim("b200", "elsewhere", "gpu.nvidia.com", 1, b200),
    ):
        status, body = _post(api, CLAIMS, ok)
        assert status == 201, body


def test_a_selector_that_costs_too_much_is_refused_within_the_deadline(api: Api) -> None:
    """Macros nested over long lists took a core for minutes: the webhook bounds a selector's
    cost before judging it, and answers at once with the reason, through the API server (a
    selector its own, looser, cost limit lets through) and posted to it directly (any pod can
    reach its Service), and keeps answering."""
    numbers = "[" + ",".join(str(i) for i in range(60)) + "]"
    costly = f"{numbers}.all(a, {numbers}.all(b, a + b >= 0))"
    status, body = _post(api, CLAIMS, _claim("costly", "research", "gpu.nvidia.com", 1, costly))
    assert status == 403, body["message"]  # (not answering within 5 s, the call would fail)
    assert "claims.validate.gpucarve.io" in body["message"], body
    assert "costs too much to judge" in body["message"], body
    # posted directly, past the API server's own limit: refused at once too
    hooks = api.get(f"{ADMISSION}/validatingwebhookconfigurations/gpucarve")["webhooks"]
    url = next(h for h in hooks if h["name"] == "claims.validate.gpucarve.io")["clientConfig"]
    worse = f"{numbers}.all(a, {numbers}.all(b, {numbers}.all(c, a + b + c >= 0)))"
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "direct", "kind": {"kind": "ResourceClaim"}, "operation": "CREATE",
        "namespace": "research",
        "object": _claim("worse", "research", "gpu.nvidia.com", 1, worse)}}  # fmt: skip
    ctx = ssl.create_default_context(cadata=base64.b64decode(url["caBundle"]).decode())
    request = urllib.request.Request(url["url"], data=json.dumps(review).encode(),
                                     headers={"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(request, context=ctx, timeout=5) as reply:
        answer = json.loads(reply.read())["response"]
    assert answer["allowed"] is False and "costs too much" in answer["status"]["message"]
    # the webhook still answers: an ordinary claim is created
    status, body = _post(api, CLAIMS, _claim("after", "research", "gpu.nvidia.com", 1))
    assert status == 201, body
