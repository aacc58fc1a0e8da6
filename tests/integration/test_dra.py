"""Dynamic Resource Allocation on a real API server (resource.k8s.io/v1) with
kube-controller-manager's ResourceClaim controller: pods that claim whole GPUs (by product
name, by at least N GiB of memory) are placed by gpucarve, which allocates their claims (the
devices, the node, the pod they are reserved for) before binding; device-plugin pods never land
on DRA nodes; a claim no device matches says which selector; a claim that is released (its pod
deleted) frees its GPUs. The same scenario as `gpucarve plan examples/dra/policy.yaml
examples/dra/workloads.yaml`, placed alike."""

from __future__ import annotations

import functools
import json
import ssl
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpucarve.cli.main import app
from gpucarve.config.policy_build import load_policy
from gpucarve.kube.api.client import Client
from gpucarve.kube.scheduler.explain import explain_pod
from tests.integration import dra_objects as dra
from tests.integration.api import Api, wait_for
from tests.integration.invariants import check_claims
from tests.integration.kube_pods import condition, node_of, pods_in
from tests.integration.stack_setup import webhook_bypassed
from tests.paths import EXAMPLES

pytestmark = pytest.mark.integration

POLICY = EXAMPLES / "dra" / "policy.yaml"
WORKLOADS = EXAMPLES / "dra" / "workloads.yaml"
RESOURCE = "/apis/resource.k8s.io/v1"
NS = "research"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    workdir = tmp_path_factory.mktemp("dra")
    # the example, with no minimum runtime before reclaim (a test cannot wait 5 min)
    doc = yaml.safe_load(POLICY.read_text())
    doc["scheduling"] = {"minRuntimeSeconds": 0}
    policy_file = workdir / "policy.yaml"
    policy_file.write_text(yaml.safe_dump(doc))
    with dra.dra_cluster(workdir, policy_file, [NS, "production"]) as (api, _):
        yield api


@pytest.fixture(autouse=True)
def claims_hold(cluster: Any) -> Iterator[None]:
    """After each test, what DRA must keep holds on the API server (tests/integration/
    invariants.py): no device in two claims, no memory slice in two partitions, claims on
    their pods' nodes."""
    yield
    check_claims(cluster, [NS, "production"])


POLICY_OF_TEST = load_policy(POLICY, []).policy


def _client(api: Api) -> Client:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return Client(api.server, ctx, {"Authorization": f"Bearer {api.token}"})


def _now() -> datetime:
    return datetime.now(UTC)


def _workloads() -> list[dict[str, Any]]:
    return list(yaml.safe_load(WORKLOADS.read_text())["workloads"])


def _unit(device: str) -> str:
    """A device of NVIDIA's naming as gpucarve's slice names it: `gpu-3` is `gpu3`; MIG
    device `gpu-0-mig-9-4-4` (profile id 9, 3g.40gb on an A100, at memory slice 4) is
    `gpu0/3g.40gb@4`."""
    parts = device.split("-")
    if len(parts) == 2:
        return f"gpu{parts[1]}"
    profile = {"9": "3g.40gb", "14": "2g.20gb", "19": "1g.10gb"}[parts[3]]
    return f"gpu{parts[1]}/{profile}@{parts[4]}"


def _planned() -> dict[str, set[str]]:
    result = CliRunner().invoke(app, ["plan", str(POLICY), str(WORKLOADS), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    return {a["workload"].split("/")[1]: {p["node"] for p in a["pods"]} for a in out["admissions"]}


def test_claims_are_allocated_and_bound_as_plan_places_them(cluster: Api) -> None:
    api = cluster
    by_product, at_least, plugin, partition, notebook = _workloads()
    # the gang of two pods, each claiming 4 H100s by product name from a template
    req = by_product["podSets"][0]["deviceClaims"]
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "four-h100", "namespace": NS},
        "spec": {"spec": dra.claim_spec(req)},
    }
    api.create(f"{RESOURCE}/namespaces/{NS}/resourceclaimtemplates", template)
    for i in range(2):
        member = dra.pod(f"by-product-{i}", template="four-h100", group="by-product")
        api.create(f"/api/v1/namespaces/{NS}/pods", member)
    wait_for(lambda: all(node_of(pods_in(api, NS).get(f"by-product-{i}") or {}) for i in range(2)),
             what="the by-product gang bound")  # fmt: skip
    # a pod with a claim of its own (named) for a GPU of at least 40 GiB
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "big-memory", "namespace": NS},
        "spec": dra.claim_spec(at_least["podSets"][0]["deviceClaims"]),
    }
    api.create(f"{RESOURCE}/namespaces/{NS}/resourceclaims", claim)
    api.create(f"/api/v1/namespaces/{NS}/pods", dra.pod("at-least-40gib", claim="big-memory"))
    wait_for(lambda: node_of(pods_in(api, NS).get("at-least-40gib") or {}), what="bound")
    gpus = int(plugin["podSets"][0]["resources"]["limits"]["nvidia.com/gpu"])
    api.create(f"/api/v1/namespaces/{NS}/pods", dra.pod("plugin", gpus=gpus))
    wait_for(lambda: node_of(pods_in(api, NS).get("plugin") or {}), what="plugin pod bound")
    # a MIG device of one profile, by its claim's selector
    claim = {**claim, "metadata": {"name": "a-partition", "namespace": NS},
             "spec": dra.claim_spec(partition["podSets"][0]["deviceClaims"])}  # fmt: skip
    api.create(f"{RESOURCE}/namespaces/{NS}/resourceclaims", claim)
    api.create(f"/api/v1/namespaces/{NS}/pods", dra.pod("partition", claim="a-partition"))
    wait_for(lambda: node_of(pods_in(api, NS).get("partition") or {}), what="partition bound")
    # a share of a GPU: 20 GiB of one, by consumable capacity
    claim = {**claim, "metadata": {"name": "a-share", "namespace": NS},
             "spec": dra.claim_spec(notebook["podSets"][0]["deviceClaims"])}  # fmt: skip
    api.create(f"{RESOURCE}/namespaces/{NS}/resourceclaims", claim)
    api.create(f"/api/v1/namespaces/{NS}/pods", dra.pod("notebook", claim="a-share"))
    wait_for(lambda: node_of(pods_in(api, NS).get("notebook") or {}), what="notebook bound")

    pods = pods_in(api, NS)
    placed = {
        "by-product": {node_of(pods[f"by-product-{i}"]) for i in range(2)},
        "at-least-40gib": {node_of(pods["at-least-40gib"])},
        "plugin": {node_of(pods["plugin"])},
        "partition": {node_of(pods["partition"])},
        "notebook": {node_of(pods["notebook"])},
    }
    assert placed == _planned()
    # each pod's claims hold devices of its node: 4 distinct GPUs per gang pod, reserved for
    # it, with the finalizer that lets the claim controller deallocate them later
    seen: set[tuple[str, str]] = set()
    claimed = (("by-product-0", 4), ("by-product-1", 4), ("at-least-40gib", 1), ("partition", 1))
    for name, count in claimed:
        c = wait_for(functools.partial(dra.claim_of, api, name), what=f"{name}'s claim allocated")
        devices = dra.devices(c)
        assert len(devices) == count and {p for p, _ in devices} == {node_of(pods[name])}
        assert not seen & set(devices), "a device allocated twice"
        seen |= set(devices)
        assert "resource.kubernetes.io/delete-protection" in c["metadata"]["finalizers"]
        slices = json.loads(pods[name]["metadata"]["annotations"]["gpucarve.io/assignment"])
        units = sorted(s.split("/", 1)[1] for s in slices["slices"])
        assert units == sorted(_unit(d) for _, d in devices)
    # quota is charged in the DRA flavors' slices, as for device-plugin requests

    def usage() -> dict[str, Any] | None:
        status = api.get("/apis/gpucarve.io/v1alpha1/queues/research").get("status") or {}
        return status.get("usage")

    # the share's result: one GPU, the memory it consumes, an id of its own; its pod holds the
    # two of the GPU's four replicas 20 GiB of 45 take
    c = wait_for(lambda: dra.claim_of(api, "notebook"), what="the share's claim allocated")
    [result] = c["status"]["allocation"]["devices"]["results"]
    assert result["consumedCapacity"] == {"memory": "20Gi"} and result["shareID"]
    slices = json.loads(pods["notebook"]["metadata"]["annotations"]["gpucarve.io/assignment"])
    gpu = result["device"].replace("gpu-", "gpu")
    assert sorted(s.split("/", 1)[1] for s in slices["slices"]) == [f"{gpu}/r0", f"{gpu}/r1"]
    want = {"h100-dra-full": 9, "a100-dra-mig-3g.40gb": 1, "a100-full": 8, "l40s-dra-shared": 2}
    wait_for(lambda: usage() == want, what=f"research's usage {want}, not {usage()}")


def test_a_claim_no_device_matches_names_its_selector(cluster: Api) -> None:
    api = cluster
    spec = dra.claim_spec([{
        "deviceClassName": "gpu.nvidia.com",
        "selectors": ['device.attributes["gpu.nvidia.com"].productName == "NVIDIA B200"'],
    }])  # fmt: skip
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": "b200", "namespace": NS}, "spec": spec}  # fmt: skip
    # as shipped, the webhook refuses the claim when it is written, naming the selector
    status, body = api.call("POST", f"{RESOURCE}/namespaces/{NS}/resourceclaims", claim)
    assert status == 403 and "NVIDIA B200" in body["message"], body
    with webhook_bypassed(api, NS, "a claim that got past admission: the scheduler's reason"):
        api.create(f"{RESOURCE}/namespaces/{NS}/resourceclaims", claim)
    api.create(f"/api/v1/namespaces/{NS}/pods", dra.pod("wants-b200", claim="b200"))

    def message() -> str | None:
        c = condition(pods_in(api, NS).get("wants-b200") or {})
        return c["message"] if c and c["status"] == "False" else None

    text = wait_for(message, what="the pending reason")
    assert "NVIDIA B200" in text and "matches no device" in text, text
    assert "NVIDIA H100 80GB HBM3" in text, text
    # `gpucarve explain` reads the claims too, and says the same
    said = explain_pod(_client(api), POLICY_OF_TEST, f"{NS}/wants-b200", "gpucarve", _now())
    assert any("cannot be scheduled as it is" in line and "NVIDIA B200" in line
               for line in said.lines), said.lines  # fmt: skip
    # a pod whose named claim does not exist yet waits for it, and says so
    api.create(f"/api/v1/namespaces/{NS}/pods", dra.pod("claim-later", claim="not-yet"))

    def waits() -> str | None:
        c = condition(pods_in(api, NS).get("claim-later") or {})
        return c["message"] if c and c["status"] == "False" else None

    assert "waiting for its ResourceClaim research/not-yet" in wait_for(waits, what="reason")


def test_released_claims_free_their_gpus(cluster: Api) -> None:
    """Deleting the gang's pods lets kube-controller-manager deallocate (and delete) their
    claims; an 8-GPU claim then fits where they ran."""
    api = cluster
    h100 = {"h100-0", "h100-1"}
    spec = dra.claim_spec([{"deviceClassName": "gpu.nvidia.com", "count": 8}])
    template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                "metadata": {"name": "eight", "namespace": NS}, "spec": {"spec": spec}}  # fmt: skip
    api.create(f"{RESOURCE}/namespaces/{NS}/resourceclaimtemplates", template)
    api.create(f"/api/v1/namespaces/{NS}/pods", dra.pod("eight", template="eight"))

    def eight_waits() -> bool:
        p = pods_in(api, NS).get("eight") or {}
        c = condition(p)
        return node_of(p) is None and bool(c and c["status"] == "False")

    wait_for(eight_waits, what="the 8-GPU pod to wait while the gang holds the H100s")
    # explain reads the claim as the scheduler does: 8 of the DRA flavor, past research's quota
    said = explain_pod(_client(api), POLICY_OF_TEST, f"{NS}/eight", "gpucarve", _now())
    text = "\n".join(said.lines)
    assert said.explanation is not None, text
    assert "queue research at 9/8 h100-dra-full, needs 8 more" in text, text
    for i in range(2):
        status, _ = api.call("DELETE", f"/api/v1/namespaces/{NS}/pods/by-product-{i}")
        assert status == 200
    bound = wait_for(lambda: node_of(pods_in(api, NS).get("eight") or {}), 60, "eight bound")
    assert bound in h100
    c = wait_for(lambda: dra.claim_of(api, "eight"), what="the 8-GPU claim allocated")
    assert len(dra.devices(c)) == 8


def test_reclaim_evicts_a_borrowing_claim_and_its_gpus_go_to_the_lender(cluster: Api) -> None:
    """Production asks for its nominal 8 H100s back while research borrows one: the cheapest
    borrowed pod (one GPU, on the node where the rest is free) is evicted, kube-controller-
    manager deallocates its claim, and production's claim gets the whole node."""
    api = cluster
    spec = dra.claim_spec([{"deviceClassName": "gpu.nvidia.com", "count": 8}])
    template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                "metadata": {"name": "eight", "namespace": "production"},
                "spec": {"spec": spec}}  # fmt: skip
    api.create(f"{RESOURCE}/namespaces/production/resourceclaimtemplates", template)
    api.create("/api/v1/namespaces/production/pods",
               dra.pod("reclaimer", template="eight", ns="production"))  # fmt: skip
    node = wait_for(lambda: node_of(pods_in(api, "production").get("reclaimer") or {}), 60,
                    "the reclaimer bound")  # fmt: skip
    assert node == "h100-1"
    assert "at-least-40gib" not in pods_in(api, NS)  # the borrowed pod was evicted
    freed = dra.claims(api)["big-memory"]  # its claim stays, deallocated
    assert not (freed.get("status") or {}).get("allocation"), freed["status"]
    c = wait_for(lambda: dra.claim_of(api, "reclaimer", "production"), what="its claim allocated")
    assert dra.devices(c) == [("h100-1", f"gpu-{g}") for g in range(8)]


def test_a_claim_pod_bound_past_the_queue_is_charged_to_it(cluster: Api) -> None:
    """A pod created with `nodeName` and a claim allocated without gpucarve (as another
    scheduler would): gpucarve holds the claim's MIG device, charges it to the pod's queue and
    says so in a BoundElsewhere Event."""
    api = cluster
    profile = 'device.attributes["gpu.nvidia.com"].profile == "3g.40gb"'
    spec = dra.claim_spec([{"deviceClassName": "mig.nvidia.com", "selectors": [profile]}])
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": "by-hand", "namespace": "production"}, "spec": spec}  # fmt: skip
    manifest = dra.pod("past-the-queue", claim="by-hand", ns="production")
    manifest["spec"]["schedulerName"] = "default-scheduler"
    manifest["spec"]["nodeName"] = "a100-mig-0"
    # as shipped, both are refused: production has no quota for it, and nodeName skips the queue
    status, _ = api.call("POST", f"{RESOURCE}/namespaces/production/resourceclaims", claim)
    assert status == 403
    why = "work another scheduler placed past the queue: gpucarve still charges it"
    with webhook_bypassed(api, "production", why):
        api.create(f"{RESOURCE}/namespaces/production/resourceclaims", claim)
        made = api.create("/api/v1/namespaces/production/pods", manifest)
    status = {
        "allocation": {
            "devices": {"results": [
                # GPU 1's 3g.40gb (GPU 0's holds the partition pod)
                {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "a100-mig-0",
                 "device": "gpu-1-mig-9-4-4"}
            ]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": ["a100-mig-0"]}
            ]}]},
        },
        "reservedFor": [{"resource": "pods", "name": "past-the-queue",
                         "uid": made["metadata"]["uid"]}],
    }  # fmt: skip
    path = f"{RESOURCE}/namespaces/production/resourceclaims/by-hand/status"
    code, reply = api.call("PATCH", path, {"status": status}, "application/merge-patch+json")
    assert code == 200, reply

    def charged() -> bool:
        got = api.get("/apis/gpucarve.io/v1alpha1/queues/production").get("status") or {}
        return bool(got.get("usage", {}).get("a100-dra-mig-3g.40gb") == 1)

    wait_for(charged, what="production charged for the pod bound past its queue")

    def warned() -> bool:
        events = api.get("/api/v1/namespaces/production/events")["items"]
        return any(e.get("reason") == "BoundElsewhere" for e in events)

    wait_for(warned, what="a BoundElsewhere Event")
