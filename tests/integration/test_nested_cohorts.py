"""Nested cohorts on the real API server, in the stack as shipped: department `ml` (research
and science) inside the company cohort beside `batch`. What research leaves unused goes to
science before batch (the same placement as `gpucarve plan` on the same workloads), and
science takes it back from batch by reclaim while its department stays within its own."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpucarve.cli.main import app
from gpucarve.devcluster.stack import LocalStack
from tests.integration.api import Api, wait_for
from tests.integration.kube_pods import (
    GPU_TOLERATION,
    create_pod,
    delete_all,
    node_of,
    pod,
    pod_group,
    pods_in,
)
from tests.integration.stack_setup import policy_in, populated, scheduling

pytestmark = pytest.mark.integration

NAMESPACES = ["batch", "research", "science"]
POLICY: dict[str, Any] = {
    "apiVersion": "gpucarve.io/v1alpha1",
    "kind": "Policy",
    "metadata": {"name": "departments"},
    "pools": [
        {
            "name": "gpus",
            "gpuModel": "H100-SXM5-80GB",
            "nodes": 4,
            "gpusPerNode": 8,
            "sharing": "exclusive",
            "nodeLabels": {"gpucarve.io/pool": "gpus"},
            "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
        }
    ],
    "cohorts": [{"name": "company"}, {"name": "ml", "parent": "company"}],
    "queues": [
        {
            "name": name,
            "namespaces": [name],
            "cohort": cohort,
            "quota": {"h100-full": {"nominal": nominal}},
        }
        for name, cohort, nominal in (
            ("batch", "company", 12),
            ("research", "ml", 16),
            ("science", "ml", 4),
        )
    ],
    "scheduling": {"minRuntimeSeconds": 0},
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalStack, Api, Path]]:
    policy_file = policy_in(tmp_path_factory, POLICY)
    with populated(tmp_path_factory.mktemp("nested"), policy_file, NAMESPACES) as parts:
        yield parts


def _gang(api: Api, ns: str, name: str, pods: int) -> list[str]:
    pod_group(api, ns, name, pods)
    names = [f"{name}-{i}" for i in range(pods)]
    for n in names:
        create_pod(api, pod(ns, n, "nvidia.com/gpu", 8, group=name))
    return names


def _bound(api: Api, ns: str) -> dict[str, str]:
    return {n: node for n, p in pods_in(api, ns).items() if (node := node_of(p))}


def _planned(policy_file: Path, tmp: Path, gangs: list[tuple[str, str, int]]) -> dict[str, Any]:
    items = [
        {
            "name": name,
            "namespace": ns,
            "podSets": [
                {
                    "name": "set-0",
                    "count": pods,
                    "resources": {
                        "requests": {"cpu": "1", "nvidia.com/gpu": "8"},
                        "limits": {"nvidia.com/gpu": "8"},
                    },
                    "tolerations": [GPU_TOLERATION],
                }
            ],
        }
        for ns, name, pods in gangs
    ]
    path = tmp / "workloads.yaml"
    path.write_text(yaml.safe_dump({"workloads": items}))
    result = CliRunner().invoke(app, ["plan", str(policy_file), str(path), "--json"])
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.output))


def test_a_departments_unused_quota_goes_to_its_own_team_as_plan_says(
    stack: tuple[LocalStack, Api, Path], tmp_path: Path
) -> None:
    kube, api, policy_file = stack
    # made before the scheduler starts, so both count as submitted at its start: flat, the
    # queues' names would decide (batch first), and so would the queues' own shares (batch
    # borrows 12 of 32, science 12 of the 20 ml holds); in the tree, department ml stays
    # within what it holds and goes before batch, which would borrow at the company level
    _gang(api, "batch", "wide", 3)
    _gang(api, "science", "train", 2)
    planned = _planned(policy_file, tmp_path, [("batch", "wide", 3), ("science", "train", 2)])
    assert [a["workload"] for a in planned["admissions"]] == ["science/train"]
    placed = {
        f"train-{i}": p["node"]
        for i, p in enumerate(sorted(planned["admissions"][0]["pods"], key=lambda p: p["pod"]))
    }
    (waiting,) = planned["pending"]
    try:
        with scheduling(kube, policy_file):
            bound = wait_for(lambda: len(_bound(api, "science")) == 2 and _bound(api, "science"),
                             what="science's gang bound")  # fmt: skip
            assert bound == placed
            assert _bound(api, "batch") == {}
            message = wait_for(
                lambda: _condition_message(api, "batch", "wide-0"), what="batch's reason"
            )
            assert message == f"{waiting['stage']}/{waiting['plugin']}: {waiting['message']}"
            assert "cohort company has 16 to lend" in message
    finally:
        delete_all(api, NAMESPACES)
        wait_for(lambda: not any(pods_in(api, ns) for ns in NAMESPACES), what="pods deleted")


def _condition_message(api: Api, ns: str, name: str) -> str | None:
    for c in (pods_in(api, ns).get(name, {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            return str(c.get("message"))
    return None


def test_the_tree_is_on_the_cluster_and_the_webhook_keeps_it_a_tree(
    stack: tuple[LocalStack, Api, Path],
) -> None:
    _, api, _ = stack
    # `gpucarve apply` (populate) wrote the cohorts beside the queues
    ml = api.get("/apis/gpucarve.io/v1alpha1/cohorts/ml")
    assert ml["spec"]["parent"] == "company"
    assert "parent" not in api.get("/apis/gpucarve.io/v1alpha1/cohorts/company")["spec"]
    # the schema refuses a cohort of its own; the webhook, a parent the policy lacks, and a
    # parent below it (a loop)
    status, body = api.call(
        "POST", "/apis/gpucarve.io/v1alpha1/cohorts",
        {"apiVersion": "gpucarve.io/v1alpha1", "kind": "Cohort",
         "metadata": {"name": "self"}, "spec": {"parent": "self"}},
    )  # fmt: skip
    assert status == 422 and "a cohort cannot be its own parent" in body["message"], body
    ml["spec"]["parent"] = "nowhere"
    status, body = api.call("PUT", "/apis/gpucarve.io/v1alpha1/cohorts/ml", ml)
    assert status == 403 and "parent cohort 'nowhere' does not exist" in body["message"], body
    top = api.get("/apis/gpucarve.io/v1alpha1/cohorts/company")
    top["spec"]["parent"] = "ml"
    status, body = api.call("PUT", "/apis/gpucarve.io/v1alpha1/cohorts/company", top)
    assert status == 403 and "company → ml → company" in body["message"], body


def test_a_team_past_its_own_quota_reclaims_from_another_department(
    stack: tuple[LocalStack, Api, Path],
) -> None:
    kube, api, policy_file = stack
    try:
        with scheduling(kube, policy_file):
            # batch borrows what research leaves unused: three of the four nodes, 12 past its own
            _gang(api, "batch", "held", 3)
            wait_for(lambda: len(_bound(api, "batch")) == 3, what="batch's gang bound")
            # science asks for two nodes, 12 GPUs past its own 4: its department holds 20
            # and uses none, so it takes back what batch borrows at the company level
            _gang(api, "science", "back", 2)
            wait_for(lambda: len(_bound(api, "science")) == 2, what="science's gang bound")
            events = api.get("/api/v1/namespaces/batch/events")["items"]
            told = [e["message"] for e in events if "reclaimed by queue science" in e["message"]]
            assert told, [e["message"] for e in events]
            assert "queue batch was borrowing h100-full" in told[0]
    finally:
        delete_all(api, NAMESPACES)
        wait_for(lambda: not any(pods_in(api, ns) for ns in NAMESPACES), what="pods deleted")
