"""The Kubernetes path does what `gpucarve plan` does: each scenario runs through the scheduler
on a real API server (kwok nodes of the three-team example) and through `plan` on the same
workloads, and both must place the same pods on the same nodes and give the same reasons."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpucarve.cli.main import app
from gpucarve.config.policy_build import load_policy
from gpucarve.kube.client import Client
from gpucarve.kube.scheduler import Scheduler, SchedulerConfig
from gpucarve.kube.stack import ADMIN_USER, LocalStack, find_binaries
from tests.integration.api import Api, wait_for
from tests.integration.kube_pods import (
    GPU_TOLERATION,
    condition,
    create_pod,
    delete_all,
    node_of,
    pod,
    pod_group,
    pods_in,
)
from tests.integration.stack_setup import populate, running
from tests.paths import BUILTIN

pytestmark = pytest.mark.integration
NAMESPACES = ["research", "production", "data-science"]


@pytest.fixture(scope="module")
def policy_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    doc = yaml.safe_load((BUILTIN / "three-teams.yaml").read_text())
    doc.setdefault("scheduling", {})["minRuntimeSeconds"] = 0
    path = tmp_path_factory.mktemp("policy") / "policy.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, policy_file: Path
) -> Iterator[tuple[LocalStack, Api]]:
    with LocalStack(find_binaries(), tmp_path_factory.mktemp("parity")) as stack:
        api = Api(stack.server, stack.tokens[ADMIN_USER])
        populate(stack, api, policy_file, NAMESPACES)
        yield stack, api


@pytest.fixture
def scheduler(cluster: tuple[LocalStack, Api], policy_file: Path) -> Iterator[Scheduler]:
    stack, api = cluster
    sched = Scheduler(
        Client.from_kubeconfig(stack.kubeconfig()),
        load_policy(policy_file, []).policy,
        SchedulerConfig(interval_s=0.5, check_invariants=True),
    )
    with running(sched):
        yield sched
    delete_all(api, NAMESPACES)
    wait_for(lambda: not any(pods_in(api, ns) for ns in NAMESPACES), what="pods deleted")
    for ns in NAMESPACES:
        api.call("DELETE", f"/apis/gpucarve.io/v1alpha1/namespaces/{ns}/podgroups")


def plan(policy_file: Path, workloads: list[dict[str, Any]], tmp: Path) -> dict[str, Any]:
    """`gpucarve plan --json` on `workloads` (written as the scheduler reads the pods)."""
    path = tmp / "workloads.yaml"
    path.write_text(yaml.safe_dump({"workloads": workloads}))
    result = CliRunner().invoke(app, ["plan", str(policy_file), str(path), "--json"])
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.output))


def gang(name: str, pods: int, gpus: int, submit: int, **extra: Any) -> dict[str, Any]:
    """A workload of `plan` shaped as the scheduler builds it from `kube_pods.pod` pods."""
    return {
        "name": name,
        "namespace": "research",
        "submitTime": submit,
        "podSets": [
            {
                "name": "set-0",
                "count": pods,
                "resources": {
                    "requests": {"cpu": "1", "nvidia.com/gpu": str(gpus)},
                    "limits": {"nvidia.com/gpu": str(gpus)},
                },
                "tolerations": [GPU_TOLERATION],
            }
        ],
        **extra,
    }


def _bound_nodes(api: Api, ns: str, names: list[str]) -> list[str] | None:
    pods = pods_in(api, ns)
    nodes = [node_of(pods.get(n) or {}) for n in names]
    return None if not all(nodes) else [n for n in nodes if n]


def _waits(api: Api, ns: str, name: str) -> str | None:
    c = condition(pods_in(api, ns).get(name) or {})
    return c["message"] if c and c["status"] == "False" else None


def _reason(planned: dict[str, Any], workload: str) -> str:
    (p,) = [p for p in planned["pending"] if p["workload"] == workload]
    return f"{p['stage']}/{p['plugin']}: {p['message']}"


def test_a_rack_gang_lands_in_one_rack_or_waits_saying_why(
    cluster: tuple[LocalStack, Api], scheduler: Scheduler, policy_file: Path, tmp_path: Path
) -> None:
    _, api = cluster
    racks = {
        n["metadata"]["name"]: n["metadata"]["labels"].get("gpucarve.io/rack")
        for n in api.get("/api/v1/nodes")["items"]
    }
    create_pod(api, pod("research", "holder", "nvidia.com/gpu", 6))
    holder = wait_for(lambda: _bound_nodes(api, "research", ["holder"]), what="holder bound")
    pod_group(api, "research", "pair", 2, topology="rack")
    for i in range(2):
        create_pod(api, pod("research", f"pair-{i}", "nvidia.com/gpu", 8, group="pair"))
    pair = wait_for(lambda: _bound_nodes(api, "research", ["pair-0", "pair-1"]), what="pair")
    pod_group(api, "research", "big", 3, topology="rack")
    for i in range(3):
        create_pod(api, pod("research", f"big-{i}", "nvidia.com/gpu", 8, group="big"))
    message = wait_for(lambda: _waits(api, "research", "big-0"), what="big's reason")

    assert len({racks[n] for n in pair}) == 1, pair
    assert racks[holder[0]] not in {racks[n] for n in pair}
    assert "in one rack" in message and not any(
        node_of(pods_in(api, "research")[f"big-{i}"]) for i in range(3)
    )
    planned = plan(
        policy_file,
        [
            gang("holder", 1, 6, 0),
            gang("pair", 2, 8, 1, topology="rack"),
            gang("big", 3, 8, 2, topology="rack"),
        ],
        tmp_path,
    )
    placed = {a["workload"]: sorted(p["node"] for p in a["pods"]) for a in planned["admissions"]}
    assert placed == {"research/holder": holder, "research/pair": sorted(pair)}
    assert _reason(planned, "research/big") == message
