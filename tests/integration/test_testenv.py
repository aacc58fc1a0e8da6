"""The test environment is real: nodes built from a policy turn Ready under kwok, a pod bound
through the binding subresource runs and completes, and RBAC applies to the scheduler's user."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpucarve.config.policy_build import load_policy
from gpucarve.devcluster.nodes import node_manifests
from gpucarve.devcluster.stack import PARTS, SCHEDULER_USER, LocalStack
from tests.integration.api import Api, wait_for
from tests.paths import BUILTIN

pytestmark = pytest.mark.integration
EXAMPLE = BUILTIN / "three-teams.yaml"
# the control plane alone: these tests are of its own start and stop
BARE = dict.fromkeys(PARTS, "the bare control plane's own start and stop")


def _ready(node: dict[str, object]) -> bool:
    status = node.get("status")
    assert isinstance(status, dict)
    return any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions", []))


def test_policy_nodes_turn_ready_with_their_gpus(admin: Api) -> None:
    manifests = node_manifests(load_policy(EXAMPLE).policy)
    for m in manifests:
        admin.create("/api/v1/nodes", m)
    wait_for(
        lambda: all(_ready(n) for n in admin.get("/api/v1/nodes")["items"]),
        what="every node Ready",
    )
    nodes = {n["metadata"]["name"]: n for n in admin.get("/api/v1/nodes")["items"]}
    assert set(nodes) == {m["metadata"]["name"] for m in manifests}
    training = nodes["training-0"]
    assert training["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    assert training["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    production = nodes["production-0"]["status"]["allocatable"]
    assert production["nvidia.com/mig-3g.40gb"] == "2"
    assert production["nvidia.com/mig-1g.10gb"] == "4"
    assert nodes["dev-0"]["status"]["allocatable"]["nvidia.com/gpu.shared"] == "8"


def test_a_bound_pod_runs_and_completes(stack: LocalStack, admin: Api) -> None:
    admin.create("/api/v1/namespaces", {"metadata": {"name": "it-run"}})
    # the scheduler's user gets the built-in scheduler role, as a deployment would
    admin.create(
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {
            "metadata": {"name": "gpucarve-scheduler"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "system:kube-scheduler",
            },
            "subjects": [{"kind": "User", "name": SCHEDULER_USER}],
        },
    )
    if not any(n["metadata"]["name"] == "dev-0" for n in admin.get("/api/v1/nodes")["items"]):
        for m in node_manifests(load_policy(EXAMPLE).policy):
            admin.create("/api/v1/nodes", m)
        wait_for(lambda: _ready(admin.get("/api/v1/nodes/dev-0")), what="dev-0 Ready")
    # kwok completes pods that a Job owns (no job controller runs: the Job is only an owner)
    job = admin.create(
        "/apis/batch/v1/namespaces/it-run/jobs",
        {
            "metadata": {"name": "nb"},
            "spec": {
                "suspend": True,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "main", "image": "notebook"}],
                    }
                },
            },
        },
    )
    pod = {
        "metadata": {
            "name": "nb",
            "annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": "2s"},
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": "nb",
                    "uid": job["metadata"]["uid"],
                }
            ],
        },
        "spec": {
            "schedulerName": "gpucarve",
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": "notebook",
                    "resources": {"limits": {"nvidia.com/gpu.shared": "1"}},
                }
            ],
        },
    }
    admin.create("/api/v1/namespaces/it-run/pods", pod)
    scheduler = Api(stack.server, stack.tokens[SCHEDULER_USER])
    # nothing else schedules here: the pod waits for us
    assert scheduler.get("/api/v1/namespaces/it-run/pods/nb")["status"]["phase"] == "Pending"
    status, _ = scheduler.call("POST", "/api/v1/namespaces", {"metadata": {"name": "x"}})
    assert status == 403  # RBAC is on: the scheduler role may not create namespaces
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "nb"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "dev-0"},
    }
    scheduler.create("/api/v1/namespaces/it-run/pods/nb/binding", binding)
    wait_for(
        lambda: (
            scheduler.get("/api/v1/namespaces/it-run/pods/nb")["status"].get("phase") == "Succeeded"
        ),
        what="the pod to run and complete",
    )
    assert scheduler.get("/api/v1/namespaces/it-run/pods/nb")["spec"]["nodeName"] == "dev-0"


def test_the_stack_stops_by_pid(tmp_path: Path, stack: LocalStack) -> None:
    other = LocalStack(stack.bin_dir, tmp_path / "second", off=BARE).start()
    pids = other.pids()
    assert set(pids) == {"etcd", "kube-apiserver"}
    other.stop()
    for pid in pids.values():
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_a_stack_starts_when_its_first_ports_are_taken(
    tmp_path: Path, stack: LocalStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another process takes the port between choosing and listening: etcd fails to bind, the
    # start is tried again on fresh ports and the stack comes up.
    import socket

    from gpucarve.devcluster import stack as stack_module

    taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = int(taken.getsockname()[1])
    real = stack_module.free_ports
    calls: list[int] = []

    def first_taken(count: int) -> list[int]:
        calls.append(count)
        ports = real(count)
        return [port, *ports[1:]] if len(calls) == 1 else ports

    monkeypatch.setattr(stack_module, "free_ports", first_taken)
    other = LocalStack(stack.bin_dir, tmp_path / "raced", off=BARE)
    try:
        other.start()
        assert "address already in use" in other.log_tail("etcd", lines=400)
        assert Api(other.server, other.tokens[stack_module.ADMIN_USER]).get("/version")["major"]
    finally:
        other.stop()
        taken.close()
    assert calls[0] == 3 and len(calls) >= 2


def test_free_ports_are_distinct() -> None:
    from gpucarve.devcluster.procs import free_ports

    ports = free_ports(64)
    assert len(set(ports)) == 64
