"""GPU health end to end on the real API server, in the stack as shipped: the node agent, fed
faults through its NVML seam (the stand-in below), reports a faulty GPU; the scheduler takes it
out of service within the pool's budget, drains it as the fault's class says (through the
Eviction API, so a PodDisruptionBudget holds), the agent resets it once nothing holds it, and
after clean checks it is back and takes work — each step in Events and metrics."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import generate_latest

from gpucarve.agent.health_loop import NodeAgent
from gpucarve.agent.readings import GpuReading, ResetFailed, Xid
from gpucarve.config.policy_build import load_policy
from gpucarve.core.policy import GpuHealth
from gpucarve.core.vocabulary import (
    OUT_OF_SERVICE_ANNOTATION,
    REBOOT_CONDITION,
    UNHEALTHY_ANNOTATION,
    UNHEALTHY_TAINT,
)
from gpucarve.devcluster.stack import LocalStack
from gpucarve.kube.api.client import Client
from gpucarve.kube.scheduler.loop import Scheduler
from tests.integration.api import Api, wait_for
from tests.integration.kube_pods import condition, create_pod, node_of, pod, pods_in
from tests.integration.stack_setup import example_policy, populated, scheduling

pytestmark = pytest.mark.integration
NODE = "training-0"


class FakeGpus:
    """The NVML seam, driven by the test: `n` healthy GPUs, the XIDs it is given, which GPUs
    a process holds (`holds`), and the resets asked of it."""

    def __init__(self, n: int = 8, holds: Callable[[int], bool] = lambda _: False) -> None:
        self.readings = [GpuReading(i, f"GPU-{i}", 55, 87, 0, 0, False, 250.0) for i in range(n)]
        self.pending: list[Xid] = []
        self.holds = holds
        self.resets: list[int] = []

    def read(self) -> list[GpuReading]:
        return list(self.readings)

    def xids(self, timeout_ms: int) -> list[Xid]:
        out, self.pending = self.pending, []
        return out

    def busy(self, index: int) -> bool:
        return self.holds(index)

    def reset(self, index: int) -> None:
        if self.holds(index):  # as the driver: no reset while a process holds the GPU
            raise ResetFailed("in use by another client")
        self.resets.append(index)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[LocalStack, Api, Path]]:
    policy_file = example_policy(tmp_path)
    with populated(tmp_path, policy_file, ["research"]) as both:
        yield both


def _agent(stack: LocalStack, node: str, gpus: FakeGpus, health: GpuHealth) -> NodeAgent:
    client = Client.from_kubeconfig(stack.kubeconfig())
    return NodeAgent(client, node, gpus, health, lambda: datetime.now(UTC))


def _with_health(policy_file: Path, **health: Any) -> GpuHealth:
    doc = yaml.safe_load(policy_file.read_text())
    doc["gpuHealth"] = health
    policy_file.write_text(yaml.safe_dump(doc))
    return load_policy(policy_file, []).policy.gpu_health


def _on_node(name: str, resource: str, count: int, node: str) -> dict[str, Any]:
    p = pod("research", name, resource, count)
    p["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    return p


def _slices(api: Api, name: str) -> list[str]:
    raw = pods_in(api, "research")[name]["metadata"]["annotations"]["gpucarve.io/assignment"]
    return list(json.loads(raw)["slices"])


def _gpu_of(api: Api, name: str) -> int:
    return int(_slices(api, name)[0].split("/")[1].removeprefix("gpu"))


def _held(api: Api) -> set[int]:
    """The GPUs the research pods placed so far hold (a process each, as on a real node)."""
    out = set()
    for p in pods_in(api, "research").values():
        raw = (p["metadata"].get("annotations") or {}).get("gpucarve.io/assignment")
        if raw:
            out |= {int(s.split("/")[1].removeprefix("gpu")) for s in json.loads(raw)["slices"]}
    return out


def _bound(api: Api, name: str) -> Callable[[], str | None]:
    return lambda: node_of(pods_in(api, "research").get(name, {}))


def _granted(api: Api, node: str) -> dict[str, str]:
    raw = (api.get(f"/api/v1/nodes/{node}")["metadata"].get("annotations") or {}).get(
        OUT_OF_SERVICE_ANNOTATION
    )
    return dict(json.loads(raw)) if raw else {}


def _reasons(api: Api, namespace: str) -> list[tuple[str, str]]:
    events = api.get(f"/api/v1/namespaces/{namespace}/events")["items"]
    return [(e["reason"], e["message"]) for e in events]


def _scraped(sched: Scheduler) -> str:
    return generate_latest(sched.metrics.registry).decode()


def _running(api: Api, name: str) -> None:
    body = {"status": {"phase": "Running"}}
    path = f"/api/v1/namespaces/research/pods/{name}/status"
    code, answer = api.call("PATCH", path, body, "application/merge-patch+json")
    assert code == 200, answer


def test_a_failing_mig_gpu_is_drained_within_its_budget_reset_checked_and_back(
    cluster: tuple[LocalStack, Api, Path],
) -> None:
    """The floor: two MIG workloads on the two GPUs of a node; an XID on one GPU. The pod on
    it is evicted once its PodDisruptionBudget allows, the other keeps running, the GPU is
    reset through the stand-in NVML once nothing holds it, passes its clean checks and takes
    work again."""
    stack, api, policy_file = cluster
    node = "production-0"
    health = _with_health(policy_file)  # the defaults
    gpus = FakeGpus(2, holds=lambda i: i in _held(api))
    agent = _agent(stack, node, gpus, health)
    with scheduling(stack, policy_file) as sched:
        for name in ("a", "b"):
            p = _on_node(name, "nvidia.com/mig-2g.20gb", 1, node)
            p["metadata"]["labels"]["budget"] = name
            create_pod(api, p)
        for name in ("a", "b"):
            wait_for(_bound(api, name), what=name)
        failed, kept = _gpu_of(api, "a"), _gpu_of(api, "b")
        assert failed != kept  # one 2g.20gb instance per GPU
        _running(api, "a")
        api.create("/apis/policy/v1/namespaces/research/poddisruptionbudgets", {
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "a"},
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"budget": "a"}}},
        })  # fmt: skip
        gpus.pending = [Xid(failed, 48)]
        (v,) = agent.check()
        assert (v.index, v.fault_class, v.needs_reset) == (failed, "memory-uncorrected", True)
        wait_for(lambda: _granted(api, node) == {str(failed): "memory-uncorrected"},
                 what="the scheduler takes the GPU out of service")  # fmt: skip
        wait_for(lambda: any(r == "OnUnhealthyGPU" for r, _ in _reasons(api, "research")),
                 what="the pod on it reported")  # fmt: skip
        # its budget refuses the eviction: the pod stays, so the GPU is not reset
        time.sleep(2)
        agent.check()
        assert "a" in pods_in(api, "research") and gpus.resets == []
        api.call("DELETE", "/apis/policy/v1/namespaces/research/poddisruptionbudgets/a")
        wait_for(lambda: "a" not in pods_in(api, "research"), what="a evicted")
        assert node_of(pods_in(api, "research")["b"])  # on the healthy GPU: untouched
        agent.check()
        assert gpus.resets == [failed]
        scraped = _scraped(sched)
        assert 'gpucarve_gpus_out_of_service{pool="production"} 1.0' in scraped
        assert (
            'gpucarve_gpus_out_of_service_by_class{fault_class="memory-uncorrected",'
            'pool="production"} 1.0'
        ) in scraped
        assert "gpucarve_failed_gpu_evictions_total 1.0" in scraped
        # nothing new lands on it while it is out
        create_pod(api, _on_node("c", "nvidia.com/mig-2g.20gb", 1, node))
        wait_for(lambda: condition(pods_in(api, "research")["c"]), what="c judged")
        assert not node_of(pods_in(api, "research")["c"])
        for _ in range(health.clean_checks):
            agent.check()
        annotations = api.get(f"/api/v1/nodes/{node}")["metadata"].get("annotations") or {}
        assert UNHEALTHY_ANNOTATION not in annotations
        wait_for(lambda: node_of(pods_in(api, "research")["c"]), what="c placed on it")
        assert _gpu_of(api, "c") == failed
        wait_for(lambda: _granted(api, node) == {}, what="the answer taken back")
        scraped = _scraped(sched)
        assert (
            'gpucarve_gpu_resets_total{fault_class="memory-uncorrected",pool="production"} 1.0'
        ) in scraped
        assert (
            'gpucarve_gpus_returned_total{fault_class="memory-uncorrected",pool="production"} 1.0'
        ) in scraped
    events = api.get("/api/v1/namespaces/default/events")["items"]
    at = {e["reason"]: e["firstTimestamp"] for e in events}  # RFC 3339 in seconds: ordered
    steps = ("GPUUnhealthy", "GPUOutOfService", "GPUReset", "GPURecovered")
    assert all(r in at for r in steps), at
    assert [at[r] for r in steps] == sorted(at[r] for r in steps), at


def test_a_burst_takes_out_at_most_the_budget_and_the_rest_keep_placing(
    cluster: tuple[LocalStack, Api, Path],
) -> None:
    stack, api, policy_file = cluster
    health = _with_health(policy_file, maxOutOfService=2)
    nodes = [f"dev-{i}" for i in range(6)]
    fakes = {n: FakeGpus(1) for n in nodes}
    agents = {n: _agent(stack, n, fakes[n], health) for n in nodes}
    with scheduling(stack, policy_file) as sched:
        for n in nodes:  # every GPU of the pool within the same minute
            fakes[n].pending = [Xid(0, 48)]
            agents[n].check()
        wait_for(lambda: sum(bool(_granted(api, n)) for n in nodes) == 2, what="two out")
        time.sleep(2)  # more cycles: still two
        out = [n for n in nodes if _granted(api, n)]
        assert len(out) == 2
        scraped = _scraped(sched)
        assert 'gpucarve_gpus_out_of_service{pool="dev"} 2.0' in scraped
        assert 'gpucarve_gpu_faults_past_budget{pool="dev"} 4.0' in scraped
        past = [m for r, m in _reasons(api, "default") if r == "GPUFaultPastBudget"]
        assert len(past) == 4 and "maxOutOfService is spent" in past[0]
        # the faulty GPUs left in service keep placing; those out take nothing; the agents
        # remediate only what the scheduler took out
        kept = [n for n in nodes if n not in out]
        for n in nodes:
            agents[n].check()
        assert [n for n in nodes if fakes[n].resets] == out
        for i, n in enumerate([*kept, out[0]]):
            create_pod(api, _on_node(f"p{i}", "nvidia.com/gpu.shared", 1, n))
        for i in range(len(kept)):
            wait_for(_bound(api, f"p{i}"), what=f"p{i}")
        last = f"p{len(kept)}"
        wait_for(lambda: condition(pods_in(api, "research")[last]), what="judged")
        assert not node_of(pods_in(api, "research")[last])
        # one back in service frees a place in the budget: the next fault is taken out
        agents[out[0]].check()  # reset
        for _ in range(health.clean_checks):
            agents[out[0]].check()
        wait_for(lambda: sum(bool(_granted(api, n)) for n in nodes) == 2 and
                 not _granted(api, out[0]), what="the next taken out")  # fmt: skip


def test_all_gpus_out_taints_the_node(cluster: tuple[LocalStack, Api, Path]) -> None:
    stack, api, policy_file = cluster
    health = load_policy(policy_file, []).policy.gpu_health
    gpus = FakeGpus()
    gpus.readings = [dataclasses.replace(r, temperature_c=95) for r in gpus.readings]
    agent = _agent(stack, NODE, gpus, health)
    with scheduling(stack, policy_file):
        assert len(agent.check()) == 8
        wait_for(lambda: len(_granted(api, NODE)) == 8, what="all eight out of service")
        agent.check()
    taints = api.get(f"/api/v1/nodes/{NODE}")["spec"].get("taints") or []
    assert {"key": UNHEALTHY_TAINT, "effect": "NoSchedule"} in [
        {k: t[k] for k in ("key", "effect")} for t in taints
    ]
    # the GPU taint the pool's nodes carry stays
    assert any(t["key"] == "nvidia.com/gpu" for t in taints)


@pytest.mark.parametrize(
    ("evict_pods", "xid", "evicted"),
    [(None, 48, True), (None, 63, False), (False, 48, False), (True, 63, True)],
)
def test_the_fault_class_says_whether_pods_go_and_evictPods_overrides_it(
    cluster: tuple[LocalStack, Api, Path], evict_pods: bool | None, xid: int, evicted: bool
) -> None:
    stack, api, policy_file = cluster
    health = _with_health(policy_file, evictPods=evict_pods)
    assert health.evict_pods is evict_pods
    gpus = FakeGpus()
    agent = _agent(stack, NODE, gpus, health)
    with scheduling(stack, policy_file) as sched:
        create_pod(api, _on_node("four", "nvidia.com/gpu", 4, NODE))
        create_pod(api, _on_node("two", "nvidia.com/gpu", 2, NODE))
        for name in ("four", "two"):
            wait_for(_bound(api, name), what=name)
        failed = _gpu_of(api, "four")
        gpus.pending = [Xid(failed, xid)]
        assert [v.index for v in agent.check()] == [failed]

        def reported() -> list[str]:
            return [m for r, m in _reasons(api, "research") if r == "OnUnhealthyGPU"]

        (message,) = wait_for(reported, what="the pod on the failed GPU reported")
        assert f"GPU {failed} of node {NODE}" in message
        assert ("evicting it" in message) is evicted
        if evicted:
            wait_for(lambda: "four" not in pods_in(api, "research"), what="four evicted")
            assert "gpucarve_failed_gpu_evictions_total 1.0" in _scraped(sched)
        else:
            time.sleep(2)  # several cycles: nothing more happens to it
            assert "four" in pods_in(api, "research")
            assert len(reported()) == 1  # reported once, not each cycle
        assert node_of(pods_in(api, "research")["two"])  # on healthy GPUs: untouched


def test_a_fault_that_needs_a_reboot_asks_for_one_and_ends_with_a_new_boot(
    cluster: tuple[LocalStack, Api, Path],
) -> None:
    stack, api, policy_file = cluster
    health = load_policy(policy_file, []).policy.gpu_health
    gpus = FakeGpus()
    agent = _agent(stack, NODE, gpus, health)

    def reboot_condition() -> dict[str, Any] | None:
        conds = api.get(f"/api/v1/nodes/{NODE}")["status"].get("conditions") or []
        return next((c for c in conds if c["type"] == REBOOT_CONDITION), None)

    with scheduling(stack, policy_file):
        gpus.pending = [Xid(5, 79)]
        agent.check()
        wait_for(lambda: _granted(api, NODE) == {"5": "fallen-off-bus"}, what="out")
        agent.check()
        c = reboot_condition()
        assert c is not None and c["status"] == "True" and "GPU 5: XID 79" in c["message"]
        # an agent restart is no remedy: the fault stands
        again = _agent(stack, NODE, FakeGpus(), health)
        assert [v.index for v in again.check()] == [5]
        # the node booted again: the fault is gone and the condition says so
        body = {"status": {"nodeInfo": {"bootID": "after-the-reboot"}}}
        code, answer = api.call("PATCH", f"/api/v1/nodes/{NODE}/status", body,
                                "application/strategic-merge-patch+json")  # fmt: skip
        assert code == 200, answer
        after = _agent(stack, NODE, FakeGpus(), health)
        assert after.check() == []
        c = reboot_condition()
        assert c is not None and c["status"] == "False"
        wait_for(lambda: _granted(api, NODE) == {}, what="back in service")
    reasons = [r for r, _ in _reasons(api, "default")]
    assert "GPURebootRequested" in reasons and "GPURecovered" in reasons
