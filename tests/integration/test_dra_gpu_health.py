"""A failing GPU on a DRA pool, in the stack as shipped with kube-scheduler beside gpucarve: the
scheduler taints the GPU's device with a DeviceTaintRule, so neither gpucarve nor
kube-scheduler's own allocator gives it to a claim; once the agent has reset it and its checks
are clean, the rule is gone and kube-scheduler's claim gets the device."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucarve.agent.health_loop import NodeAgent
from gpucarve.agent.readings import Xid
from gpucarve.config.policy_build import load_policy
from gpucarve.core.vocabulary import UNHEALTHY_TAINT
from gpucarve.kube.api.client import Client
from gpucarve.kube.scheduler.explain import explain_pod
from tests.integration import dra_objects as dra
from tests.integration.api import Api, wait_for
from tests.integration.kube_pods import condition, node_of, pods_in
from tests.integration.test_gpu_health import FakeGpus
from tests.paths import EXAMPLES

pytestmark = pytest.mark.integration
POLICY = EXAMPLES / "dra" / "policy.yaml"
RULES = f"{dra.RESOURCE}/devicetaintrules"
NODE = "h100-0"
OUTSIDE = "outside"  # a namespace no queue governs: kube-scheduler's pods


def _client(api: Api) -> Client:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return Client(api.server, ctx, {"Authorization": f"Bearer {api.token}"})


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Api]:
    doc = yaml.safe_load(POLICY.read_text())
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(yaml.safe_dump(doc))
    with dra.dra_cluster(tmp_path, policy_file, [dra.NS, OUTSIDE]) as (api, _):
        yield api


def _eight_on_node(api: Api, name: str, ns: str, scheduler: str) -> None:
    spec = dra.claim_spec([{"deviceClassName": "gpu.nvidia.com", "count": 8}])
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": name, "namespace": ns}, "spec": spec}  # fmt: skip
    api.create(f"{dra.RESOURCE}/namespaces/{ns}/resourceclaims", claim)
    manifest = dra.pod(name, claim=name, ns=ns)
    manifest["spec"]["schedulerName"] = scheduler
    manifest["spec"]["nodeSelector"] = {"kubernetes.io/hostname": NODE}
    manifest["spec"]["tolerations"] = [{"operator": "Exists"}]
    api.create(f"/api/v1/namespaces/{ns}/pods", manifest)


def _rules(api: Api) -> list[dict[str, Any]]:
    return list(api.get(RULES)["items"])


def test_a_failing_dra_gpu_is_tainted_for_every_allocator_and_untainted_on_return(
    cluster: Api,
) -> None:
    api = cluster
    health = load_policy(POLICY, []).policy.gpu_health
    gpus = FakeGpus(8)
    agent = NodeAgent(_client(api), NODE, gpus, health, lambda: datetime.now(UTC))
    gpus.pending = [Xid(3, 48)]
    agent.check()
    (rule,) = wait_for(lambda: _rules(api), what="the device's DeviceTaintRule")
    assert rule["spec"]["deviceSelector"] == {
        "driver": "gpu.nvidia.com", "pool": NODE, "device": "gpu-3"
    }  # fmt: skip
    assert rule["spec"]["taint"]["key"] == UNHEALTHY_TAINT
    assert rule["spec"]["taint"]["value"] == "memory-uncorrected"
    assert rule["spec"]["taint"]["effect"] == "NoSchedule"
    # kube-scheduler's allocator gives no claim the tainted device: eight on the node wait
    _eight_on_node(api, "k8s", OUTSIDE, "default-scheduler")
    # gpucarve's neither; explain says which GPU is out
    _eight_on_node(api, "ours", dra.NS, "gpucarve")

    def waits(name: str, ns: str) -> bool:
        c = condition(pods_in(api, ns)[name])
        return bool(c and c["status"] == "False")

    wait_for(lambda: waits("k8s", OUTSIDE) and waits("ours", dra.NS), what="both judged")
    assert not node_of(pods_in(api, OUTSIDE)["k8s"])
    assert not node_of(pods_in(api, dra.NS)["ours"])
    policy = load_policy(POLICY, []).policy
    said = explain_pod(_client(api), policy, f"{dra.NS}/ours", "gpucarve", datetime.now(UTC))
    text = "\n".join(said.lines)
    assert "out of service for a fault" in text and f"{NODE}/gpu3" in text, text
    api.call("DELETE", f"/api/v1/namespaces/{dra.NS}/pods/ours?gracePeriodSeconds=0")
    # reset (nothing holds it), clean checks: back, the rule deleted, the claim allocated
    agent.check()
    assert gpus.resets == [3]
    for _ in range(health.clean_checks):
        agent.check()
    wait_for(lambda: not _rules(api), what="the rule deleted")
    wait_for(lambda: node_of(pods_in(api, OUTSIDE)["k8s"]), what="kube-scheduler places it")
    claim = dra.claims(api, OUTSIDE)["k8s"]
    assert (NODE, "gpu-3") in dra.devices(claim)
