"""GPU health end to end on the real API server: the node agent, fed faults through its NVML
seam, takes one GPU of a node out of service (annotation and Event); the scheduler places a
pod on the node's other GPUs only; after clean checks the GPU is back and gets work."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import generate_latest

from gpucarve.agent.health_loop import NodeAgent
from gpucarve.agent.readings import GpuReading, Xid
from gpucarve.config.policy_build import load_policy
from gpucarve.core.vocabulary import UNHEALTHY_ANNOTATION, UNHEALTHY_TAINT
from gpucarve.devcluster.stack import LocalStack
from gpucarve.kube.api.client import Client
from tests.integration.api import Api, wait_for
from tests.integration.kube_pods import condition, create_pod, node_of, pod, pods_in
from tests.integration.stack_setup import example_policy, populated, scheduling

pytestmark = pytest.mark.integration
NODE = "training-0"


class FakeGpus:
    """The NVML seam, driven by the test: eight healthy GPUs, and the XIDs it is given."""

    def __init__(self) -> None:
        self.readings = [GpuReading(i, f"GPU-{i}", 55, 87, 0, 0, False, 250.0) for i in range(8)]
        self.pending: list[Xid] = []

    def read(self) -> list[GpuReading]:
        return list(self.readings)

    def xids(self, timeout_ms: int) -> list[Xid]:
        out, self.pending = self.pending, []
        return out


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[LocalStack, Api, Path]]:
    policy_file = example_policy(tmp_path)
    with populated(tmp_path, policy_file, ["research"]) as both:
        yield both


def _on_node(name: str, gpus: int) -> dict[str, Any]:
    p = pod("research", name, "nvidia.com/gpu", gpus)
    p["spec"]["nodeSelector"] = {"kubernetes.io/hostname": NODE}
    return p


def _slices(api: Api, name: str) -> list[str]:
    raw = pods_in(api, "research")[name]["metadata"]["annotations"]["gpucarve.io/assignment"]
    return list(json.loads(raw)["slices"])


def test_a_failed_gpu_gets_no_work_and_comes_back(cluster: tuple[LocalStack, Api, Path]) -> None:
    stack, api, policy_file = cluster
    health = load_policy(policy_file, []).policy.gpu_health
    gpus = FakeGpus()
    agent = NodeAgent(
        Client.from_kubeconfig(stack.kubeconfig()), NODE, gpus, health, lambda: datetime.now(UTC)
    )
    gpus.pending = [Xid(3, 79)]
    assert [v.index for v in agent.check()] == [3]
    node = api.get(f"/api/v1/nodes/{NODE}")
    assert json.loads(node["metadata"]["annotations"][UNHEALTHY_ANNOTATION]) == {"3": "XID 79"}
    assert not any(t["key"] == UNHEALTHY_TAINT for t in node["spec"].get("taints") or [])
    events = api.get("/api/v1/namespaces/default/events")["items"]
    assert any(e["reason"] == "GPUUnhealthy" and "GPU 3" in e["message"] for e in events)

    with scheduling(stack, policy_file) as sched:
        create_pod(api, _on_node("eight", 8))
        create_pod(api, _on_node("seven", 7))
        wait_for(lambda: node_of(pods_in(api, "research")["seven"]), what="seven bound")
        assert all(not s.startswith(f"{NODE}/gpu3") for s in _slices(api, "seven"))
        scraped = generate_latest(sched.metrics.registry).decode()
        assert 'gpucarve_gpus_out_of_service{pool="training"} 1.0' in scraped
        assert 'gpucarve_gpus_out_of_service{pool="dev"} 0.0' in scraped
        c = condition(pods_in(api, "research")["eight"])
        assert (
            c is not None
            and c["status"] == "False"
            and not node_of(pods_in(api, "research")["eight"])
        )
        # clean checks bring it back; then it takes a pod
        for _ in range(health.clean_checks):
            agent.check()
        node = api.get(f"/api/v1/nodes/{NODE}")
        assert UNHEALTHY_ANNOTATION not in (node["metadata"].get("annotations") or {})
        create_pod(api, _on_node("one", 1))
        wait_for(lambda: node_of(pods_in(api, "research")["one"]), what="one bound")
        assert _slices(api, "one")[0].startswith(f"{NODE}/gpu3")
    events = api.get("/api/v1/namespaces/default/events")["items"]
    assert any(e["reason"] == "GPURecovered" for e in events)


def test_all_gpus_out_taints_the_node(cluster: tuple[LocalStack, Api, Path]) -> None:
    stack, api, policy_file = cluster
    health = load_policy(policy_file, []).policy.gpu_health
    gpus = FakeGpus()
    gpus.readings = [dataclasses.replace(r, temperature_c=95) for r in gpus.readings]
    agent = NodeAgent(
        Client.from_kubeconfig(stack.kubeconfig()), NODE, gpus, health, lambda: datetime.now(UTC)
    )
    assert len(agent.check()) == 8
    taints = api.get(f"/api/v1/nodes/{NODE}")["spec"].get("taints") or []
    assert {"key": UNHEALTHY_TAINT, "effect": "NoSchedule"} in [
        {k: t[k] for k in ("key", "effect")} for t in taints
    ]
    # the GPU taint the pool's nodes carry stays
    assert any(t["key"] == "nvidia.com/gpu" for t in taints)


@pytest.mark.parametrize("evict", [False, True])
def test_pods_on_a_failed_gpu_are_reported_and_evicted_as_the_policy_says(
    cluster: tuple[LocalStack, Api, Path], evict: bool
) -> None:
    stack, api, policy_file = cluster
    doc = yaml.safe_load(policy_file.read_text())
    doc["gpuHealth"] = {"evictPods": evict}
    policy_file.write_text(yaml.safe_dump(doc))
    health = load_policy(policy_file, []).policy.gpu_health
    assert health.evict_pods is evict
    gpus = FakeGpus()
    agent = NodeAgent(
        Client.from_kubeconfig(stack.kubeconfig()), NODE, gpus, health, lambda: datetime.now(UTC)
    )
    with scheduling(stack, policy_file) as sched:
        create_pod(api, _on_node("four", 4))
        create_pod(api, _on_node("two", 2))
        for name in ("four", "two"):
            wait_for(lambda n=name: node_of(pods_in(api, "research").get(n, {})), what=name)
        failed = int(_slices(api, "four")[0].split("/")[1].removeprefix("gpu"))
        gpus.pending = [Xid(failed, 79)]
        assert [v.index for v in agent.check()] == [failed]

        def reported() -> list[dict[str, Any]]:
            events = api.get("/api/v1/namespaces/research/events")["items"]
            return [e for e in events if e["reason"] == "OnUnhealthyGPU"]

        (event,) = wait_for(reported, what="the pod on the failed GPU reported")
        assert event["involvedObject"]["name"] == "four"
        assert f"GPU {failed} of node {NODE}" in event["message"]
        assert ("evicting it" in event["message"]) is evict
        if evict:
            wait_for(lambda: "four" not in pods_in(api, "research"), what="four evicted")
            scraped = generate_latest(sched.metrics.registry).decode()
            assert "gpucarve_failed_gpu_evictions_total 1.0" in scraped
        else:
            time.sleep(2)  # several cycles: nothing more happens to it
            assert "four" in pods_in(api, "research")
            assert len(reported()) == 1  # reported once, not each cycle
        assert node_of(pods_in(api, "research")["two"])  # on healthy GPUs: untouched
