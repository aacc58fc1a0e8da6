"""Consolidation on a real API server, with kube-controller-manager's Deployment and ReplicaSet
controllers: an 8-GPU pod that fits on neither node (4 GPUs free on each) has the newer of two
4-GPU Deployments' pods moved; its ReplicaSet makes the pod again, which binds beside the
other, and the 8-GPU pod binds where the moved pod was. A bare pod (no controller to make it
again) is never moved. The engine's side of the same scenario (what `plan` and `simulate` run)
is tests/engine/test_consolidate.py::test_the_cheapest_work_is_moved_and_the_gang_starts_now."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpucarve.devcluster.stack import ADMIN_USER, LocalStack, find_binaries
from tests.integration.api import Api, wait_for
from tests.integration.kube_pods import (
    GPU_TOLERATION,
    condition,
    create_pod,
    node_of,
    pod,
    pods_in,
)
from tests.integration.stack_setup import policy_in, populate, scheduling

pytestmark = pytest.mark.integration
NS = "research"
DEPLOYMENTS = f"/apis/apps/v1/namespaces/{NS}/deployments"
POLICY = {
    "apiVersion": "gpucarve.io/v1alpha1",
    "kind": "Policy",
    "metadata": {"name": "consolidate"},
    "pools": [
        {
            "name": "train",
            "gpuModel": "H100-SXM5-80GB",
            "nodes": 2,
            "gpusPerNode": 8,
            "sharing": "exclusive",
        },
    ],
    "queues": [{"name": NS, "namespaces": [NS], "quota": {"h100-full": {"nominal": 16}}}],
    "scheduling": {"minRuntimeSeconds": 0, "consolidateMaxMoves": 2},
}


@pytest.fixture(scope="module")
def policy_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return policy_in(tmp_path_factory, POLICY)


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, policy_file: Path
) -> Iterator[tuple[LocalStack, Api]]:
    workdir = tmp_path_factory.mktemp("consolidate")
    with LocalStack(find_binaries(), workdir, policy_file) as stack:
        api = Api(stack.server, stack.tokens[ADMIN_USER])
        populate(stack, api, policy_file, [NS])
        yield stack, api


def _deployment(name: str, gpus: int, grace_s: int | None = None) -> dict[str, Any]:
    """One replica, as a user writes it: its ReplicaSet makes the pod again if it goes (a
    Job's pods would be completed by the kwok nodes). A deleted pod is gone within its grace
    period (30 s unless `grace_s`): the kwok nodes end it at some time in it."""
    spec: dict[str, Any] = {
        "schedulerName": "gpucarve",
        "tolerations": [GPU_TOLERATION],
        "containers": [
            {
                "name": "main",
                "image": "server",
                "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
            }
        ],
    }
    if grace_s is not None:
        spec["terminationGracePeriodSeconds"] = grace_s
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
        },
    }


def _pods_of(api: Api, owner: str) -> dict[str, dict[str, Any]]:
    """The Deployment's pods that are not being deleted, by name."""
    return {
        n: p
        for n, p in pods_in(api, NS).items()
        if n.startswith(f"{owner}-") and not p["metadata"].get("deletionTimestamp")
    }


def _bound_one(api: Api, owner: str) -> tuple[str, str] | None:
    """(pod, node) of the Deployment's one live pod once it is bound."""
    pods = _pods_of(api, owner)
    if len(pods) != 1:
        return None
    ((name, p),) = pods.items()
    node = node_of(p)
    return (name, node) if node else None


def _events(api: Api, reason: str) -> list[dict[str, Any]]:
    items = api.get(f"/api/v1/namespaces/{NS}/events").get("items") or []
    return [e for e in items if e.get("reason") == reason]


def test_a_replicas_pod_is_moved_so_that_a_pod_that_fits_nowhere_binds(
    cluster: tuple[LocalStack, Api], policy_file: Path
) -> None:
    stack, api = cluster
    with scheduling(stack, policy_file):
        api.create(DEPLOYMENTS, _deployment("a", 4))
        _, a_node = wait_for(lambda: _bound_one(api, "a"), what="a's pod bound")
        # a bare filler packs beside a; the newer c then takes the other node
        create_pod(api, pod(NS, "filler", "nvidia.com/gpu", 4))
        filler = wait_for(lambda: node_of(pods_in(api, NS).get("filler") or {}), what="filler")
        assert filler == a_node
        time.sleep(1.1)  # creation times are whole seconds: c is younger than a
        api.create(DEPLOYMENTS, _deployment("c", 4))
        c_pod, c_node = wait_for(lambda: _bound_one(api, "c"), what="c's pod bound")
        assert c_node != a_node
        api.call("DELETE", f"/api/v1/namespaces/{NS}/pods/filler?gracePeriodSeconds=0")
        wait_for(lambda: "filler" not in pods_in(api, NS), what="the filler gone")
        # 4 GPUs free on each node: the 8-GPU pod fits only once c's pod moves
        create_pod(api, pod(NS, "big", "nvidia.com/gpu", 8))
        big = wait_for(lambda: node_of(pods_in(api, NS).get("big") or {}), what="big bound")
        assert big == c_node
        # c's ReplicaSet made its pod again, and it is bound beside a; a never moved
        moved = wait_for(
            lambda: (b := _bound_one(api, "c")) and b[0] != c_pod and b, what="c's new pod bound"
        )
        assert moved[1] == a_node
        assert _bound_one(api, "a") == (next(iter(_pods_of(api, "a"))), a_node)
        (event,) = wait_for(lambda: _events(api, "Moved"), what="the Moved event")
        assert event["involvedObject"]["name"] == c_pod
        assert "moved for research/big" in event["message"], event["message"]
        assert not _events(api, "Preempted")


def test_a_bare_pod_is_never_moved(cluster: tuple[LocalStack, Api], policy_file: Path) -> None:
    stack, api = cluster
    _clear(api)
    with scheduling(stack, policy_file):
        for name in ("p", "filler", "q"):
            create_pod(api, pod(NS, name, "nvidia.com/gpu", 4))
            wait_for(lambda n=name: node_of(pods_in(api, NS).get(n) or {}), what=f"{name} bound")
        nodes = {n: node_of(p) for n, p in pods_in(api, NS).items()}
        assert nodes["p"] == nodes["filler"] != nodes["q"], nodes
        api.call("DELETE", f"/api/v1/namespaces/{NS}/pods/filler?gracePeriodSeconds=0")
        create_pod(api, pod(NS, "big2", "nvidia.com/gpu", 8))
        reason = wait_for(
            lambda: (c := condition(pods_in(api, NS).get("big2") or {})) and c["message"],
            what="big2's reason",
        )
        assert reason.startswith("placement/"), reason
        time.sleep(2)  # several cycles: nothing is moved for it
        assert node_of(pods_in(api, NS)["big2"]) is None
        assert set(pods_in(api, NS)) == {"p", "q", "big2"}


PDBS = f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets"


def _clear(api: Api) -> None:
    """The module's earlier pods and Deployments gone."""
    for name in pods_in(api, NS):
        api.call("DELETE", f"/api/v1/namespaces/{NS}/pods/{name}?gracePeriodSeconds=0")
    api.call("DELETE", DEPLOYMENTS)
    wait_for(lambda: not pods_in(api, NS), what="the earlier tests' pods gone")


def _moved_for(api: Api, name: str) -> list[dict[str, Any]]:
    return [e for e in _events(api, "Moved") if f"moved for {NS}/{name}," in e["message"]]


def _running(api: Api, name: str) -> None:
    """The pod's phase Running: the Eviction API passes over a budget for a pod that is not
    running yet, and the kwok nodes here leave these pods Pending."""
    status = f"/api/v1/namespaces/{NS}/pods/{name}/status"
    body = {"status": {"phase": "Running"}}
    code, _ = api.call("PATCH", status, body, "application/merge-patch+json")
    assert code == 200


def test_a_move_a_disruption_budget_refuses_is_asked_again_once_it_allows(
    cluster: tuple[LocalStack, Api], policy_file: Path
) -> None:
    """The eviction is refused, so the 8-GPU pod does not wait for a pod that stays: it says why
    and is tried again after the server's back-off; once the budget is gone a move is made and
    the pod binds. (Which of the two pods moves depends on when the kwok nodes start each:
    a pod's progress counts from its start, so both are under the budget.)"""
    stack, api = cluster
    _clear(api)
    with scheduling(stack, policy_file):
        api.create(DEPLOYMENTS, _deployment("e", 4, grace_s=2))
        e_pod, e_node = wait_for(lambda: _bound_one(api, "e"), what="e's pod bound")
        create_pod(api, pod(NS, "filler", "nvidia.com/gpu", 4))
        wait_for(lambda: node_of(pods_in(api, NS).get("filler") or {}), what="filler")
        api.create(DEPLOYMENTS, _deployment("f", 4, grace_s=2))
        f_pod, f_node = wait_for(lambda: _bound_one(api, "f"), what="f's pod bound")
        assert f_node != e_node
        match = {"matchExpressions": [{"key": "app", "operator": "In", "values": ["e", "f"]}]}
        budget = {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "ef"},
            # no disruption controller here: the budget is never processed, so refused always
            "spec": {"maxUnavailable": 0, "selector": match},
        }
        api.create(PDBS, budget)
        _running(api, e_pod)
        _running(api, f_pod)
        api.call("DELETE", f"/api/v1/namespaces/{NS}/pods/filler?gracePeriodSeconds=0")
        wait_for(lambda: "filler" not in pods_in(api, NS), what="the filler gone")
        create_pod(api, pod(NS, "big3", "nvidia.com/gpu", 8))
        reason = wait_for(
            lambda: (c := condition(pods_in(api, NS)["big3"])) and c["message"],
            what="big3's reason",
        )
        assert reason.startswith("preemption/refused: the eviction of research/"), reason
        assert "(a PodDisruptionBudget); asked again in 10 s" in reason, reason
        time.sleep(2)  # several cycles: the refused move is not waited for, nothing is moved
        assert node_of(pods_in(api, NS)["big3"]) is None
        assert (_bound_one(api, "e"), _bound_one(api, "f")) == ((e_pod, e_node), (f_pod, f_node))
        assert not _moved_for(api, "big3")
        api.call("DELETE", f"{PDBS}/ef")
        big = wait_for(lambda: node_of(pods_in(api, NS).get("big3") or {}), what="big3 bound")
        # the moved one was made again beside the other, where big3 did not go
        now = wait_for(
            lambda: (e := _bound_one(api, "e")) and (f := _bound_one(api, "f")) and (e, f),
            what="e's and f's pods bound",
        )
        assert {node for _, node in now} == {e_node, f_node} - {big}
        moved = [n for (n, _), before in zip(now, (e_pod, f_pod), strict=True) if n != before]
        assert len(moved) == 1, now
        (event,) = _moved_for(api, "big3")
        assert event["involvedObject"]["name"] in {e_pod, f_pod}
