"""The CRDs are accepted by a real API server, which then enforces their schemas."""

from __future__ import annotations

from typing import Any

import pytest

from gpucarve.kube.api.crds import crd_manifests
from tests.integration.api import Api, wait_for

pytestmark = pytest.mark.integration
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


@pytest.fixture(scope="module")
def crds(admin: Api) -> None:
    for crd in crd_manifests():
        status, body = admin.call("POST", CRD_PATH, crd)
        assert status in (201, 409), body

        def established(name: str = crd["metadata"]["name"]) -> bool:
            conds = admin.get(f"{CRD_PATH}/{name}").get("status", {}).get("conditions", [])
            return any(c["type"] == "Established" and c["status"] == "True" for c in conds)

        wait_for(established, what=f"{crd['metadata']['name']} Established")


def queue(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "gpucarve.io/v1alpha1", "kind": "Queue", "metadata": {"name": name},
            "spec": spec}  # fmt: skip


def test_a_valid_queue_is_stored_with_defaults_and_status(crds: None, admin: Api) -> None:
    q = queue("crd-valid", cohort="company", quota={"h100-full": {"nominal": 16}})
    created = admin.create("/apis/gpucarve.io/v1alpha1/queues", q)
    assert created["spec"]["weight"] == 1  # the schema's default
    created["status"] = {"admittedWorkloads": 2, "pendingWorkloads": 1, "usage": {"h100-full": 8}}
    status, body = admin.call("PUT", "/apis/gpucarve.io/v1alpha1/queues/crd-valid/status", created)
    assert status == 200, body
    assert admin.get("/apis/gpucarve.io/v1alpha1/queues/crd-valid")["status"]["usage"] == {
        "h100-full": 8
    }


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ({"quota": {"h100-full": {"nominal": -1}}}, "nominal"),
        ({"quota": {"h100-full": {"nominal": 4, "lendingLimit": 6}}}, "lendingLimit"),
        ({"quota": {}, "weight": 0}, "weight"),
        ({"quota": {}, "cohort": "Not_A_Name"}, "cohort"),
        ({"weight": 2}, "quota"),
    ],
)
def test_bad_queues_are_refused_naming_the_field(
    crds: None, admin: Api, spec: dict[str, Any], needle: str
) -> None:
    status, body = admin.call("POST", "/apis/gpucarve.io/v1alpha1/queues", queue("bad", **spec))
    assert status == 422, body
    assert needle in body["message"]


def test_pod_groups_validate_min_member(crds: None, admin: Api) -> None:
    admin.create("/api/v1/namespaces", {"metadata": {"name": "it-pg"}})
    path = "/apis/gpucarve.io/v1alpha1/namespaces/it-pg/podgroups"
    group = {"apiVersion": "gpucarve.io/v1alpha1", "kind": "PodGroup",
             "metadata": {"name": "train"}, "spec": {"minMember": 16}}  # fmt: skip
    created = admin.create(path, group)
    assert created["spec"]["topology"] == "none"
    group["metadata"]["name"] = "empty"
    group["spec"] = {"minMember": 0}
    status, body = admin.call("POST", path, group)
    assert status == 422 and "minMember" in body["message"]
