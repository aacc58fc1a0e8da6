"""The devices pods really got, end to end on the real API server: the node agent reads the
kubelet's PodResources API (a server of the tests' own on a Unix socket) and NVML (the seam),
writes what each pod got onto the Node, and the scheduler follows it — the pod's slice moves
to the device the kubelet gave it, the slice it had assumed serves another pod, the
disagreement is reported once, and dynamic MIG changes the GPU that is really free."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucarve.agent.health_loop import NodeAgent
from gpucarve.agent.pod_devices import list_pod_devices
from gpucarve.agent.publisher import PodDevicesPublisher
from gpucarve.agent.readings import DeviceSlot, GpuReading, Xid
from gpucarve.config.policy_build import load_policy
from gpucarve.core.vocabulary import POD_DEVICES_ANNOTATION as POD_DEVICES
from gpucarve.devcluster.stack import ADMIN_USER, LocalStack, find_binaries
from gpucarve.kube.api.client import Client
from tests.dynamic_mig_policy import dynamic_mig_doc
from tests.integration.api import Api, wait_for
from tests.integration.kube_pods import create_pod, node_of, pod, pods_in
from tests.integration.stack_setup import example_policy, populate, populated, scheduling
from tests.integration.test_mig_handoff import CM_NS, _run
from tests.pod_resources_server import PodResourcesServer

pytestmark = pytest.mark.integration


class FakeNode:
    """The NVML seam of a node: healthy GPUs, each with a UUID, and MIG instances."""

    def __init__(self, gpus: int, mig: dict[str, DeviceSlot] | None = None) -> None:
        self.readings = [GpuReading(i, f"GPU-{i}", 50, 87, 0, 0, False, 200.0) for i in range(gpus)]
        self.slots = {f"GPU-{i}": DeviceSlot(i) for i in range(gpus)} | (mig or {})

    def read(self) -> list[GpuReading]:
        return list(self.readings)

    def xids(self, timeout_ms: int) -> list[Xid]:
        return []

    def devices(self) -> dict[str, DeviceSlot]:
        return dict(self.slots)


def _agent(stack: LocalStack, policy_file: Path, node: str, gpus: FakeNode,
           socket: Path) -> NodeAgent:  # fmt: skip
    client = Client.from_kubeconfig(stack.kubeconfig())
    publisher = PodDevicesPublisher(client, node, lambda: list_pod_devices(str(socket)), gpus)
    health = load_policy(policy_file, []).policy.gpu_health
    return NodeAgent(client, node, gpus, health, lambda: datetime.now(UTC), publisher)


def _slices(p: dict[str, Any]) -> list[str]:
    return list(json.loads(p["metadata"]["annotations"]["gpucarve.io/assignment"])["slices"])


def _reconciled(api: Api, ns: str) -> list[dict[str, Any]]:
    events = api.get(f"/api/v1/namespaces/{ns}/events")["items"]
    return [e for e in events if e["reason"] == "DevicesReconciled"]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[LocalStack, Api, Path]]:
    policy_file = example_policy(tmp_path)
    with populated(tmp_path, policy_file, ["research"]) as both:
        yield both


def _on(node: str, name: str, gpus: int) -> dict[str, Any]:
    p = pod("research", name, "nvidia.com/gpu", gpus)
    p["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    return p


def test_the_scheduler_follows_the_device_the_kubelet_gave(
    cluster: tuple[LocalStack, Api, Path], tmp_path: Path
) -> None:
    stack, api, policy_file = cluster
    node = "training-0"
    gpus = FakeNode(8)
    with PodResourcesServer(tmp_path / "kubelet.sock") as kubelet, scheduling(stack, policy_file):
        agent = _agent(stack, policy_file, node, gpus, tmp_path / "kubelet.sock")
        create_pod(api, _on(node, "one", 1))
        wait_for(lambda: node_of(pods_in(api, "research")["one"]), what="one bound")
        (assumed,) = _slices(pods_in(api, "research")["one"])
        real = 7 if not assumed.endswith("/gpu7") else 6
        # the device plugin gave it another GPU than gpucarve chose
        kubelet.pods = [("research", "one", "nvidia.com/gpu", [f"GPU-{real}"])]
        agent.check()
        written = api.get(f"/api/v1/nodes/{node}")["metadata"]["annotations"][POD_DEVICES]
        assert json.loads(written) == {"research/one": [f"gpu{real}"]}
        (event,) = wait_for(lambda: _reconciled(api, "research"), what="reconciled")
        assert event["involvedObject"]["name"] == "one"
        assert assumed in event["message"] and f"{node}/gpu{real}" in event["message"]
        # seven GPUs are free: the one gpucarve had assumed is among them, the real one not
        create_pod(api, _on(node, "seven", 7))
        wait_for(lambda: node_of(pods_in(api, "research")["seven"]), what="seven bound")
        seven = _slices(pods_in(api, "research")["seven"])
        assert assumed in seven and f"{node}/gpu{real}" not in seven
        agent.check()  # unchanged: nothing written, nothing reported again
    assert len(_reconciled(api, "research")) == 1


def test_dynamic_mig_changes_the_gpu_that_is_really_free(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(dynamic_mig_doc()))
    node = "inf-0"
    mig = {"MIG-0": DeviceSlot(0, "7g.80gb", 0), "MIG-1": DeviceSlot(1, "7g.80gb", 0)}
    gpus = FakeNode(2, mig)
    with LocalStack(find_binaries(), tmp_path / "stack", path) as st:
        api = Api(st.server, st.tokens[ADMIN_USER])
        populate(st, api, path, ("serving", CM_NS))
        with (
            PodResourcesServer(tmp_path / "kubelet.sock") as kubelet,
            _run(st, api, path, fail=False) as (_, manager),
        ):
            agent = _agent(st, path, node, gpus, tmp_path / "kubelet.sock")
            create_pod(api, pod("serving", "big", "nvidia.com/mig-7g.80gb"))
            wait_for(lambda: node_of(pods_in(api, "serving").get("big") or {}), what="big bound")
            (assumed,) = _slices(pods_in(api, "serving")["big"])
            thought = int(assumed.split("/")[1].removeprefix("gpu"))
            # the kubelet gave it the other GPU's instance
            kubelet.pods = [("serving", "big", "nvidia.com/mig-7g.80gb", [f"MIG-{1 - thought}"])]
            agent.check()
            wait_for(lambda: _reconciled(api, "serving"), what="reconciled")
            for i in range(3):
                create_pod(api, pod("serving", f"small{i}", "nvidia.com/mig-1g.10gb"))

            def small_bound() -> dict[str, dict[str, Any]] | None:
                pods = pods_in(api, "serving")
                return pods if all(node_of(pods.get(f"small{i}") or {}) for i in range(3)) else None

            pods = wait_for(small_bound, timeout_s=60, what="small pods bound after the change")
        # the GPU gpucarve had thought busy was the free one: it was changed, the other not
        (done,) = manager.applied
        assert done.changed_gpus == [thought]
        for i in range(3):
            (s,) = _slices(pods[f"small{i}"])
            assert s.startswith(f"{node}/gpu{thought}/1g.10gb@")
