"""One ResourceClaim shared by several pods, on a real API server: the first pod placed
allocates it; the second runs on the claim's node and is added to its reservedFor (as
kube-scheduler does), asking for no device of its own, so the queue is charged once; when the
first pod goes, the claim stays allocated for the second."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucarve.kube.scheduler.loop import Scheduler
from tests.integration import dra_objects as dra
from tests.integration.api import Api, wait_for
from tests.integration.invariants import check_claims
from tests.integration.kube_pods import node_of, pods_in
from tests.paths import EXAMPLES

pytestmark = pytest.mark.integration
NS = "research"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Api, Scheduler]]:
    workdir = tmp_path_factory.mktemp("dra-shared")
    doc = yaml.safe_load((EXAMPLES / "dra" / "policy.yaml").read_text())
    policy_file = workdir / "policy.yaml"
    policy_file.write_text(yaml.safe_dump(doc))
    with dra.dra_cluster(workdir, policy_file, [NS, "production"]) as both:
        yield both


def _usage(api: Api) -> dict[str, Any]:
    status = api.get(f"/apis/gpucarve.io/v1alpha1/queues/{NS}").get("status") or {}
    return dict(status.get("usage") or {})


def _reserved(api: Api) -> list[str]:
    claim = dra.claims(api).get("pair") or {}
    return [r["name"] for r in (claim.get("status") or {}).get("reservedFor") or []]


def _shared_pair(api: Api, gpus: int) -> None:
    """ResourceClaim `pair` of `gpus` H100s, and pods pair-a and pair-b that share it."""
    spec = dra.claim_spec([{"deviceClassName": "gpu.nvidia.com", "count": gpus}])
    api.create(f"{dra.RESOURCE}/namespaces/{NS}/resourceclaims",
               {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {"name": "pair", "namespace": NS}, "spec": spec})  # fmt: skip
    for name in ("pair-a", "pair-b"):
        api.create(f"/api/v1/namespaces/{NS}/pods", dra.pod(name, claim="pair"))


def test_two_pods_share_one_claims_gpus_charged_once(cluster: tuple[Api, Scheduler]) -> None:
    api, sched = cluster
    _shared_pair(api, 2)
    bound = wait_for(
        lambda: all(node_of(pods_in(api, NS).get(n) or {}) for n in ("pair-a", "pair-b")),
        what="both pods sharing the claim bound",
    )
    assert bound
    pods = pods_in(api, NS)
    nodes = {node_of(pods["pair-a"]), node_of(pods["pair-b"])}
    claim = wait_for(functools.partial(lambda: dra.claims(api).get("pair")), what="the claim")
    devices = dra.devices(claim)
    assert len(devices) == 2 and nodes == {devices[0][0]}, (nodes, devices)
    assert sorted(_reserved(api)) == ["pair-a", "pair-b"]
    # two GPUs charged, not four: in the Queue's status and the scheduler's metrics
    wait_for(lambda: _usage(api) == {"h100-dra-full": 2}, what=f"usage of 2, not {_usage(api)}")
    labels = {"queue": NS, "flavor": "h100-dra-full"}
    assert sched.metrics.registry.get_sample_value("gpucarve_queue_usage_slices", labels) == 2
    check_claims(api, [NS])
    # the pod that allocated it goes: the claim stays allocated, reserved for the other
    first = _reserved(api)[0]
    status, _ = api.call("DELETE", f"/api/v1/namespaces/{NS}/pods/{first}")
    assert status == 200
    other = {"pair-a", "pair-b"} - {first}
    wait_for(lambda: _reserved(api) == sorted(other), what="the claim reserved for the other")
    assert dra.devices(dra.claims(api)["pair"]) == devices
    wait_for(lambda: _usage(api) == {"h100-dra-full": 2}, what=f"still 2, not {_usage(api)}")
    check_claims(api, [NS])


@pytest.fixture
def one_node(tmp_path: Path) -> Iterator[tuple[Api, Scheduler]]:
    """One H100 node, research borrowing all of it: production's nominal 8 takes it back."""
    doc = yaml.safe_load((EXAMPLES / "dra" / "policy.yaml").read_text())
    for pool in doc["pools"]:
        if pool["name"] == "h100":
            pool["nodes"] = 1
    for q in doc["queues"]:
        if q["name"] == "research":
            q["quota"]["h100-dra-full"] = {"nominal": 0, "borrowingLimit": 8}
    doc.setdefault("scheduling", {})["minRuntimeSeconds"] = 0
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(yaml.safe_dump(doc))
    with dra.dra_cluster(tmp_path, policy_file, [NS, "production"]) as both:
        yield both


def test_reclaim_evicts_every_pod_sharing_the_claim_at_once(
    one_node: tuple[Api, Scheduler],
) -> None:
    """The claim's devices go back only when no pod reserves it: reclaim evicts the pods that
    share it together, in one round, and says so on the one the engine did not choose."""
    api, _ = one_node
    _shared_pair(api, 8)
    wait_for(lambda: sorted(_reserved(api)) == ["pair-a", "pair-b"], what="both reserve it")
    template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                "metadata": {"name": "eight", "namespace": "production"},
                "spec": {"spec": dra.claim_spec([{"deviceClassName": "gpu.nvidia.com",
                                                  "count": 8}])}}  # fmt: skip
    api.create(f"{dra.RESOURCE}/namespaces/production/resourceclaimtemplates", template)
    api.create("/api/v1/namespaces/production/pods",
               dra.pod("lender", template="eight", ns="production"))  # fmt: skip

    def gone() -> bool:
        pods = pods_in(api, NS)
        return all(n not in pods or pods[n]["metadata"].get("deletionTimestamp")
                   for n in ("pair-a", "pair-b"))  # fmt: skip

    wait_for(gone, timeout_s=60, what="both pods sharing the claim evicted")
    events = api.get(f"/api/v1/namespaces/{NS}/events")["items"]
    preempted = [e for e in events if e["reason"] == "Preempted"]
    said = [e["message"] for e in preempted]
    assert len(said) == 2, said
    # one round: both evictions in the same cycle, not the second after the first freed nothing
    stamps = sorted(datetime.fromisoformat(e.get("lastTimestamp") or e["eventTime"])
                    for e in preempted)  # fmt: skip
    assert stamps[1] - stamps[0] <= timedelta(seconds=2), stamps
    assert any("shares an allocated ResourceClaim with" in m for m in said), said
    assert not any(m.rstrip().endswith("was borrowing") for m in said), said
    bound = wait_for(lambda: node_of(pods_in(api, "production").get("lender") or {}),
                     timeout_s=60, what="the lender's pod bound")  # fmt: skip
    assert bound == "h100-0"
