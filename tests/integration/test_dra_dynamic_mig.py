"""Dynamic MIG on a DRA pool, on a real API server (1.37: partitionable devices, beta and on):
the node publishes every partition its A100s can hold, each consuming its GPU's memory-slice
counters. A claim for a 7g.80gb partition, a profile no GPU is carved into, makes the scheduler
carve the GPU with nothing in use at once (the new layout recorded on the node, no cordon, no
MIG manager), allocate the 7g.80gb device and bind; the 3g.40gb partition in use on the other
GPU is never touched. `gpucarve plan` on the same scenario places the 3g.40gb pod on the same
partition and says the 7g.80gb one waits for this repartition."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpucarve.cli.main import app
from tests.integration.api import Api, wait_for
from tests.integration.dra_objects import RESOURCE, claim_of, claim_spec, devices, dra_cluster, pod
from tests.integration.invariants import check_claims
from tests.integration.kube_pods import node_of, pods_in
from tests.paths import EXAMPLES

pytestmark = pytest.mark.integration
NS = "research"
NODE = "a100-mig-0"
PROFILE = 'device.attributes["gpu.nvidia.com"].profile == "{}"'


def _policy(folder: Path) -> Path:
    """The DRA example with its A100 pool carved on demand (7g.80gb too), research's quota
    for it."""
    doc = yaml.safe_load((EXAMPLES / "dra" / "policy.yaml").read_text())
    mig = next(p for p in doc["pools"] if p["name"] == "a100-mig")
    mig["mig"]["dynamic"] = {"profiles": ["7g.80gb"]}
    research = next(q for q in doc["queues"] if q["name"] == NS)
    research["quota"]["a100-dra-mig-7g.80gb"] = {"nominal": 2}
    path = folder / "policy.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _workloads(folder: Path) -> Path:
    docs = [
        {"name": name, "namespace": NS, "podSets": [{"name": "main", "count": 1, "deviceClaims": [
            {"deviceClassName": "mig.nvidia.com", "selectors": [PROFILE.format(profile)]}]}]}
        for name, profile in (("part", "3g.40gb"), ("whole", "7g.80gb"))
    ]  # fmt: skip
    path = folder / "workloads.yaml"
    path.write_text(yaml.safe_dump({"workloads": docs}))
    return path


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Api, Path]]:
    workdir = tmp_path_factory.mktemp("dra-dynamic")
    policy_file = _policy(workdir)
    with dra_cluster(workdir, policy_file, [NS, "production"]) as (api, _):
        yield api, workdir


@pytest.fixture(autouse=True)
def claims_hold(cluster: Any) -> Iterator[None]:
    """After each test, what DRA must keep holds on the API server (tests/integration/
    invariants.py): no device in two claims, no memory slice in two partitions, claims on
    their pods' nodes."""
    yield
    check_claims(cluster[0], [NS])


def _claim(api: Api, name: str, profile: str) -> None:
    spec = claim_spec(
        [{"deviceClassName": "mig.nvidia.com", "selectors": [PROFILE.format(profile)]}]
    )
    api.create(f"{RESOURCE}/namespaces/{NS}/resourceclaims",
               {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {"name": name, "namespace": NS}, "spec": spec})  # fmt: skip


def _layout(api: Api) -> dict[str, Any]:
    annotations = api.get(f"/api/v1/nodes/{NODE}")["metadata"].get("annotations") or {}
    return dict(json.loads(annotations.get("gpucarve.io/mig-layout", "{}")).get("layout") or {})


def test_a_profile_no_gpu_has_is_carved_at_once_and_allocated(
    cluster: tuple[Api, Path],
) -> None:
    api, workdir = cluster
    policy, workloads = workdir / "policy.yaml", _workloads(workdir)
    planned = CliRunner().invoke(app, ["plan", str(policy), str(workloads), "--json"])
    assert planned.exit_code == 0, planned.output
    plan = json.loads(planned.output)
    (admitted,) = plan["admissions"]
    (waiting,) = plan["pending"]
    assert waiting["workload"] == f"{NS}/whole" and waiting["plugin"] == "mig-repartition", waiting
    _claim(api, "part", "3g.40gb")
    api.create(f"/api/v1/namespaces/{NS}/pods", pod("part", claim="part"))
    wait_for(lambda: node_of(pods_in(api, NS).get("part") or {}), what="the 3g.40gb pod bound")
    part = pods_in(api, NS)["part"]
    slices = json.loads(part["metadata"]["annotations"]["gpucarve.io/assignment"])["slices"]
    assert slices == admitted["pods"][0]["slices"]  # the partition plan chose
    kept = devices(wait_for(lambda: claim_of(api, "part"), what="its claim allocated"))
    # no GPU is carved into 7g.80gb: the claim makes one
    assert all("7g.80gb" not in str(v) for v in _layout(api).values())
    _claim(api, "whole", "7g.80gb")
    api.create(f"/api/v1/namespaces/{NS}/pods", pod("whole", claim="whole"))
    wait_for(lambda: node_of(pods_in(api, NS).get("whole") or {}), what="the 7g.80gb pod bound")
    got = devices(wait_for(lambda: claim_of(api, "whole"), what="its claim allocated"))
    (gpu,) = {d.split("-")[1] for _, d in got}
    assert got == [(NODE, f"gpu-{gpu}-mig-0-0-8")]  # 7g.80gb (profile id 0) at slice 0
    layout = _layout(api)
    assert layout[gpu] == ["7g.80gb@0"], layout
    # the partition in use stays where it was, on the other GPU, still held by its claim
    (used,) = kept
    assert used[1].startswith(f"gpu-{1 - int(gpu)}-mig-9-")
    assert devices(claim_of(api, "part") or {}) == kept
    node = api.get(f"/api/v1/nodes/{NODE}")
    assert not (node.get("spec") or {}).get("unschedulable")  # never cordoned
    events = api.get(f"/api/v1/namespaces/default/events?fieldSelector=involvedObject.name={NODE}")
    assert any(e["reason"] == "MIGReconfigured" for e in events["items"]), events["items"]
