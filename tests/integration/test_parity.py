"""The Kubernetes path does what `gpucarve plan` does: each scenario runs through the scheduler
on a real API server (kwok nodes of the three-team example) and through `plan` on the same
workloads, and both must place the same pods on the same nodes and give the same reasons."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpucarve.cli.main import app
from gpucarve.devcluster.stack import ADMIN_USER, LocalStack, find_binaries
from gpucarve.kube.scheduler.loop import Scheduler
from tests.integration.api import Api, wait_for
from tests.integration.kube_pods import (
    GPU_TOLERATION,
    condition,
    create_pod,
    delete_all,
    install_coscheduling_crd,
    node_of,
    pod,
    pod_group,
    pods_in,
)
from tests.integration.stack_setup import example_policy, populate, scheduling

pytestmark = pytest.mark.integration
NAMESPACES = ["research", "production", "data-science"]


@pytest.fixture(scope="module")
def policy_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return example_policy(tmp_path_factory.mktemp("policy"))


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, policy_file: Path
) -> Iterator[tuple[LocalStack, Api]]:
    with LocalStack(find_binaries(), tmp_path_factory.mktemp("parity"), policy_file) as stack:
        api = Api(stack.server, stack.tokens[ADMIN_USER])
        populate(stack, api, policy_file, NAMESPACES)
        install_coscheduling_crd(api)
        yield stack, api


@pytest.fixture
def scheduler(cluster: tuple[LocalStack, Api], policy_file: Path) -> Iterator[Scheduler]:
    stack, api = cluster
    with scheduling(stack, policy_file) as sched:
        yield sched
    delete_all(api, NAMESPACES)
    wait_for(lambda: not any(pods_in(api, ns) for ns in NAMESPACES), what="pods deleted")
    for ns in NAMESPACES:
        for group in ("gpucarve.io", "scheduling.x-k8s.io"):
            api.call("DELETE", f"/apis/{group}/v1alpha1/namespaces/{ns}/podgroups")


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


def plan_explained(policy_file: Path, tmp: Path, workload: str) -> list[str]:
    args = ["plan", str(policy_file), str(tmp / "workloads.yaml"), "--explain", workload]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return str(result.stdout).splitlines()


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
    # (until its third pod exists the gang waits for it: that reason comes first)
    message = wait_for(
        lambda: (m := _waits(api, "research", "big-0")) and "in one rack" in m and m,
        what="big's reason",
    )

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

    # the PodGroups say the same
    big = wait_for(lambda: _group_status(api, "big"), what="big's PodGroup status")
    assert (big["phase"], big["scheduled"], big["reason"]) == ("Pending", 0, message)
    (cond,) = big["conditions"]
    assert (cond["type"], cond["status"], cond["reason"]) == ("Scheduled", "False", "Unschedulable")
    pair_status = wait_for(lambda: _group_status(api, "pair", "Running"), what="pair running")
    assert pair_status["scheduled"] == 2 and pair_status["running"] == 2
    assert pair_status["conditions"][0]["status"] == "True"
    # and `kubectl describe pod` shows the reason among the pod's Events
    described = kubectl(cluster[0], "describe", "pod", "-n", "research", "big-0")
    assert "FailedScheduling" in described and "in one rack" in described, described
    # `kubectl gpucarve explain` (the plugin) prints the chain, as `plan --explain` does
    explained = kubectl(
        cluster[0], "gpucarve", "explain", "research/big-0", "--policy", str(policy_file)
    ).splitlines()
    assert explained[0] == "pod research/big-0: Pending, not bound"
    assert explained[1] == f"  its condition (from the scheduler): {message}"
    assert "gang research/big: 0 pods bound, 3 waiting" in explained
    chain = explained[explained.index(next(x for x in explained if x.startswith("workload "))) :]
    assert chain == plan_explained(policy_file, tmp_path, "research/big"), explained
    assert f"decision: {message}" in chain
    # the policy read from the chart's ConfigMap says the same
    cm = {"metadata": {"name": "gpucarve-policy"}, "data": {"policy.yaml": policy_file.read_text()}}
    api.create("/api/v1/namespaces/default/configmaps", cm)
    args = ["explain", "research/big-0", "--policy-config-map", "default/gpucarve-policy"]
    result = CliRunner().invoke(app, [*args, "--kubeconfig", str(cluster[0].kubeconfig())])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == explained


def test_a_gang_short_past_its_timeout_frees_its_gpus_and_says_so(
    cluster: tuple[LocalStack, Api], scheduler: Scheduler
) -> None:
    _, api = cluster
    create_pod(api, pod("data-science", "holder", "nvidia.com/gpu", 8))
    wait_for(lambda: _bound_nodes(api, "data-science", ["holder"]), what="one node held")
    pod_group(api, "research", "g", 3, scheduleTimeoutSeconds=3)
    names = [f"g-{i}" for i in range(3)]
    for n in names:
        create_pod(api, _quick_exit(pod("research", n, "nvidia.com/gpu", 8, group="g")))
    wait_for(lambda: _bound_nodes(api, "research", names), what="the gang bound")
    # one pod fails and is gone; its node is taken meanwhile; its replacement finds no room
    api.call("DELETE", "/api/v1/namespaces/research/pods/g-2?gracePeriodSeconds=0")
    create_pod(api, pod("data-science", "taker", "nvidia.com/gpu", 8))
    wait_for(lambda: _bound_nodes(api, "data-science", ["taker"]), what="its node taken")
    create_pod(api, pod("research", "g-2", "nvidia.com/gpu", 8, group="g"))

    # the PodGroup's status says GangTimeout from the release until the gang is whole again
    # (its released pods, still bound while they go, do not count); recorded while waiting
    seen: list[dict[str, Any]] = []

    def timed_out() -> dict[str, Any] | None:
        if (now := _group_status(api, "g")) is not None:
            seen.append(now)
        return next((st for st in seen if st["conditions"][0]["reason"] == "GangTimeout"), None)

    def released() -> bool:
        timed_out()
        left = pods_in(api, "research")
        return "g-0" not in left and "g-1" not in left

    wait_for(released, what="the short gang's pods released")

    def told(name: str, reason: str) -> list[str]:
        events = api.get("/api/v1/namespaces/research/events")["items"]
        return [
            e["message"]
            for e in events
            if e["involvedObject"]["name"] == name and e["reason"] == reason
        ]

    # the remainder was told why (then, with its gang's pods gone, that it waits for them)
    (message,) = wait_for(
        lambda: [m for m in told("g-2", "FailedScheduling") if "gang-timeout" in m],
        what="the remainder's reason",
    )
    assert message.startswith("queueing/gang-timeout: gang research/g ran 2 pods, 1 short")
    assert "(timeout 3 s, scheduleTimeoutSeconds)" in message
    status = wait_for(timed_out, what="the PodGroup's GangTimeout status")
    (cond,) = status["conditions"]
    assert (cond["status"], cond["reason"]) == ("False", "GangTimeout")
    assert status["reason"] == cond["message"] == message.partition(": ")[2]
    assert told("g-0", "GangTimeout") == told("g-1", "GangTimeout") == [cond["message"]]
    # the GPUs it held serve others
    create_pod(api, pod("production", "after", "nvidia.com/gpu", 8))
    wait_for(lambda: _bound_nodes(api, "production", ["after"]), what="its GPUs reused")


def test_a_coscheduling_pod_group_keeps_its_min_member(
    cluster: tuple[LocalStack, Api], scheduler: Scheduler
) -> None:
    _, api = cluster
    pod_group(api, "research", "cs", 3, group="scheduling.x-k8s.io")
    for i in range(2):
        create_pod(api, pod("research", f"cs-{i}", "nvidia.com/gpu", 4, group="cs"))
    message = wait_for(lambda: _waits(api, "research", "cs-0"), what="the short gang's reason")
    assert message == (
        "gang/min-member: pod group research/cs has 2 of its 3 pods (minMember); "
        "waiting for the rest"
    )
    assert not any(node_of(p) for p in pods_in(api, "research").values())
    create_pod(api, pod("research", "cs-2", "nvidia.com/gpu", 4, group="cs"))
    wait_for(lambda: _bound_nodes(api, "research", ["cs-0", "cs-1", "cs-2"]), what="all three")


def _quick_exit(manifest: dict[str, Any]) -> dict[str, Any]:
    # evicted, it is gone within a second (kwok deletes it at the end of its grace period)
    manifest["spec"]["terminationGracePeriodSeconds"] = 1
    return manifest


def _group_status(api: Api, name: str, phase: str | None = None) -> dict[str, Any] | None:
    got = api.get(f"/apis/gpucarve.io/v1alpha1/namespaces/research/podgroups/{name}")
    status = got.get("status")
    if not status or (phase is not None and status.get("phase") != phase):
        return None
    return dict(status)


def kubectl(stack: LocalStack, *args: str) -> str:
    # kubectl finds its plugins on PATH: `kubectl-gpucarve` is this environment's console script
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    done = subprocess.run(
        # flags after the command: kubectl passes a plugin's to it
        [str(stack.bin_dir / "kubectl"), *args, "--kubeconfig", str(stack.kubeconfig())],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PATH": path},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_an_elastic_group_starts_at_its_minimum_grows_and_shrinks_first(
    cluster: tuple[LocalStack, Api], scheduler: Scheduler
) -> None:
    _, api = cluster
    for n in ("h0", "h1"):
        create_pod(api, pod("data-science", n, "nvidia.com/gpu", 8))
    wait_for(lambda: _bound_nodes(api, "data-science", ["h0", "h1"]), what="two nodes held")
    pod_group(api, "research", "el", 2)
    names = [f"el-{i}" for i in range(4)]
    for n in names:
        elastic = pod("research", n, "nvidia.com/gpu", 8, group="el",
                      priority_class="dev-best-effort")  # fmt: skip
        create_pod(api, _quick_exit(elastic))

    def bound_count() -> int:
        pods = pods_in(api, "research")
        return sum(1 for n in names if n in pods and node_of(pods[n]))

    wait_for(lambda: bound_count() == 2 and _waits(api, "research", "el-3"), what="min bound")
    assert bound_count() == 2  # admitted at its minimum, the rest wait for room
    status = wait_for(lambda: _group_status(api, "el"), what="el's status")
    assert status["scheduled"] == 2 and status["phase"] in ("Scheduled", "Running")
    for n in ("h0", "h1"):
        api.call("DELETE", f"/api/v1/namespaces/data-science/pods/{n}?gracePeriodSeconds=0")
    wait_for(lambda: bound_count() == 4, what="the group grown to 4")
    # a higher priority of the same queue needs 8 GPUs: one surplus pod goes, three keep running
    create_pod(api, pod("research", "urgent", "nvidia.com/gpu", 8, priority_class="training"))
    wait_for(lambda: _bound_nodes(api, "research", ["urgent"]), what="urgent bound")
    left = [n for n in names if n in pods_in(api, "research")]
    assert len(left) == 3 and all(node_of(pods_in(api, "research")[n]) for n in left), left
    events = api.get("/api/v1/namespaces/research/events")["items"]
    (shrunk,) = [e for e in events if e["reason"] == "Preempted"]
    assert "gives back 1 pods and keeps running" in shrunk["message"]
    assert shrunk["involvedObject"]["name"] not in left


def test_the_fragmentation_model_fills_the_used_node_on_both_paths(
    cluster: tuple[LocalStack, Api], scheduler: Scheduler, policy_file: Path, tmp_path: Path
) -> None:
    # A 6-GPU pod, then a 2-GPU one: the model puts the second beside the first (that node is
    # then full, nothing stranded) and keeps the other H100 nodes whole for 8-GPU work; then
    # an 8-GPU pod finds a whole node. The scheduler on the API server and `plan` agree.
    _, api = cluster
    order = [("six", 6), ("two", 2), ("eight", 8)]
    bound: dict[str, str] = {}
    for name, gpus in order:
        create_pod(api, pod("research", name, "nvidia.com/gpu", gpus))
        bound[name] = wait_for(lambda n=name: _bound_nodes(api, "research", [n]), what=name)[0]
    assert bound["two"] == bound["six"] and bound["eight"] != bound["six"]
    planned = plan(policy_file, [gang(n, 1, g, k) for k, (n, g) in enumerate(order)], tmp_path)
    placed = {a["workload"]: [p["node"] for p in a["pods"]] for a in planned["admissions"]}
    assert placed == {f"research/{n}": [bound[n]] for n, _ in order}


def test_a_gang_whose_pod_is_deleted_and_not_replaced_is_released(
    cluster: tuple[LocalStack, Api], scheduler: Scheduler
) -> None:
    _, api = cluster
    pod_group(api, "research", "lone", 2, scheduleTimeoutSeconds=3)
    names = ["lone-0", "lone-1"]
    for n in names:
        create_pod(api, _quick_exit(pod("research", n, "nvidia.com/gpu", 8, group="lone")))
    wait_for(lambda: _bound_nodes(api, "research", names), what="the gang bound")
    # one pod is deleted and nothing creates it again: its survivor holds 8 GPUs for nothing
    api.call("DELETE", "/api/v1/namespaces/research/pods/lone-1?gracePeriodSeconds=0")
    wait_for(lambda: "lone-0" not in pods_in(api, "research"), what="the survivor released")
    events = api.get("/api/v1/namespaces/research/events")["items"]
    said = [
        e["message"]
        for e in events
        if e["involvedObject"]["name"] == "lone-0" and e["reason"] == "GangTimeout"
    ]
    assert said and "1 short" in said[0], said


def test_a_gang_that_never_gathers_says_its_timeout_passed(
    cluster: tuple[LocalStack, Api], scheduler: Scheduler
) -> None:
    _, api = cluster
    pod_group(api, "research", "few", 3, scheduleTimeoutSeconds=2)
    for n in ("few-0", "few-1"):
        create_pod(api, pod("research", n, "nvidia.com/gpu", 1, group="few"))

    def said() -> str | None:
        c = condition(pods_in(api, "research")["few-0"])
        message = c["message"] if c else ""
        return message if "scheduleTimeoutSeconds (2 s) passed" in message else None

    message = wait_for(said, what="the timeout said")
    assert "has 2 of its 3 pods" in message and "lower minMember" in message
