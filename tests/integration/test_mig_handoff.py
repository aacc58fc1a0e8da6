"""Dynamic MIG on a real API server: the scheduler hands a repartition to a stand-in of the GPU
Operator's MIG manager (tests/integration/mig_manager.py) through the mig-parted ConfigMap and
the `nvidia.com/mig.config` label; each step of the sequence is checked on the objects."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucarve.config.policy_build import load_policy
from gpucarve.devcluster.stack import ADMIN_USER, LocalStack, find_binaries
from gpucarve.kube.api.client import Client
from gpucarve.kube.scheduler.loop import Scheduler, SchedulerConfig
from gpucarve.kube.scheduler.mig_handoff import HandoffConfig
from tests.dynamic_mig_policy import dynamic_mig_doc
from tests.integration.api import Api, wait_for
from tests.integration.kube_pods import condition, create_pod, node_of, pod, pods_in
from tests.integration.mig_manager import MigManagerStandIn
from tests.integration.stack_setup import populate, running

pytestmark = pytest.mark.integration
CM_NS, CM_NAME = "gpu-operator", "gpucarve-mig-parted-config"
NODE = "inf-0"

POLICY = dynamic_mig_doc()


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[LocalStack, Api, Path]]:
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(POLICY))
    with LocalStack(find_binaries(), tmp_path / "stack", path) as st:
        api = Api(st.server, st.tokens[ADMIN_USER])
        populate(st, api, path, ("serving", CM_NS))
        yield st, api, path


@contextmanager
def _run(
    st: LocalStack, api: Api, path: Path, fail: bool, manager_runs: bool = True
) -> Iterator[tuple[Scheduler, MigManagerStandIn]]:
    policy = load_policy(path, []).policy
    manager = MigManagerStandIn(api, CM_NS, CM_NAME, {NODE: [{"7g.80gb": 1}] * 2}, fail=fail)
    if manager_runs:
        manager.start()
    mig = HandoffConfig(CM_NS, CM_NAME, propagation_s=0.5, timeout_s=60)
    sched = Scheduler(
        Client.from_kubeconfig(st.kubeconfig()), policy, SchedulerConfig(interval_s=0.3, mig=mig)
    )
    try:
        with running(sched):
            yield sched, manager
    finally:
        manager.close()


def _node(api: Api) -> dict[str, Any]:
    return dict(api.get(f"/api/v1/nodes/{NODE}"))


def _gpu_of(p: dict[str, Any]) -> set[int]:
    slices = json.loads(p["metadata"]["annotations"]["gpucarve.io/assignment"])["slices"]
    return {int(s.split("/")[1].removeprefix("gpu")) for s in slices}


def _events(api: Api, reason: str) -> list[dict[str, Any]]:
    items = api.get("/api/v1/namespaces/default/events")["items"]
    return [e for e in items if e["reason"] == reason and e["involvedObject"]["name"] == NODE]


def test_an_idle_gpu_is_repartitioned_through_the_mig_manager_protocol(
    stack: tuple[LocalStack, Api, Path],
) -> None:
    st, api, path = stack
    with _run(st, api, path, fail=False) as (_, manager):
        create_pod(api, pod("serving", "big", "nvidia.com/mig-7g.80gb"))
        big = wait_for(lambda: node_of(pods_in(api, "serving").get("big") or {}), what="bound")
        assert big == NODE
        big_gpu = _gpu_of(pods_in(api, "serving")["big"])
        for i in range(3):
            create_pod(api, pod("serving", f"small{i}", "nvidia.com/mig-1g.10gb"))

        def small_bound() -> dict[str, dict[str, Any]] | None:
            pods = pods_in(api, "serving")
            ok = all(node_of(pods.get(f"small{i}") or {}) for i in range(3))
            return pods if ok else None

        pods = wait_for(small_bound, timeout_s=60, what="small pods bound after the change")

        # The MIG manager acted once: on the idle GPU, with the node cordoned, while only the
        # 7g pod (on the other GPU) was on the node.
        (done,) = manager.applied
        assert done.state == "success" and done.cordoned
        assert done.pods_on_node == ["serving/big"]
        (changed,) = done.changed_gpus
        assert {changed} != big_gpu
        for i in range(3):
            assert _gpu_of(pods[f"small{i}"]) == {changed}
        assert not pods["big"]["metadata"].get("deletionTimestamp"), "the 7g pod was disturbed"

        # The configuration: per GPU, the changed one 1g.10gb instances, the other as it was.
        cm = api.get(f"/api/v1/namespaces/{CM_NS}/configmaps/{CM_NAME}")
        configs = yaml.safe_load(cm["data"]["config.yaml"])["mig-configs"]
        node = wait_for(
            lambda: (
                (n := _node(api))["metadata"]["annotations"].get("gpucarve.io/mig-layout") and n
            ),
            what="layout recorded",
        )
        labels, annotations = node["metadata"]["labels"], node["metadata"]["annotations"]
        entries = configs[labels["nvidia.com/mig.config"]]
        by_gpu = {e["devices"][0]: e["mig-devices"] for e in entries}
        assert set(by_gpu[changed]) == {"1g.10gb"} and by_gpu[changed]["1g.10gb"] >= 3
        assert by_gpu[1 - changed] == {"7g.80gb": 1}
        assert labels["nvidia.com/mig.config.state"] == "success"
        assert "gpucarve.io/mig-change" not in annotations
        assert not node["spec"].get("unschedulable"), "the node was left cordoned"
        layout = json.loads(annotations["gpucarve.io/mig-layout"])
        made = by_gpu[changed]["1g.10gb"]
        assert len(layout["layout"][str(changed)]) == made
        assert node["status"]["allocatable"]["nvidia.com/mig-1g.10gb"] == str(made)
        assert _events(api, "MIGReconfigured")


def test_a_failed_change_is_cleaned_up_and_not_retried_within_the_interval(
    stack: tuple[LocalStack, Api, Path],
) -> None:
    st, api, path = stack
    with _run(st, api, path, fail=True) as (_, manager):
        for i in range(2):
            create_pod(api, pod("serving", f"small{i}", "nvidia.com/mig-1g.10gb"))
        wait_for(lambda: _events(api, "MIGReconfigureFailed"), timeout_s=60, what="failure")

        def cleaned() -> dict[str, Any] | None:
            n = _node(api)
            busy = "gpucarve.io/mig-change" in n["metadata"].get("annotations", {})
            return None if busy or n["spec"].get("unschedulable") else n

        node = wait_for(cleaned, what="clean-up")
        assert [a.state for a in manager.applied] == ["failed"]
        assert "nvidia.com/mig-1g.10gb" not in node["status"]["allocatable"]
        # the failed try counts as a change: no second one within minSecondsBetweenChanges
        layout = json.loads(node["metadata"]["annotations"]["gpucarve.io/mig-layout"])
        assert layout["changedAt"], "the failed GPUs' time of change was not recorded"
        pods = pods_in(api, "serving")
        assert not any(node_of(p) for p in pods.values())
        reason = wait_for(lambda: condition(pods_in(api, "serving")["small0"]), what="reason")
        assert reason["status"] == "False"
        time.sleep(2)
        assert len(manager.applied) == 1


def test_a_node_without_a_mig_manager_is_never_cordoned_for_a_change(
    stack: tuple[LocalStack, Api, Path],
) -> None:
    """No `nvidia.com/mig.config.state` on the node: nothing there would apply a change, so
    the scheduler neither writes a configuration nor cordons the node; the work says why it
    waits."""
    st, api, path = stack
    with _run(st, api, path, fail=False, manager_runs=False) as (sched, _):
        create_pod(api, pod("serving", "small", "nvidia.com/mig-1g.10gb"))
        reason = wait_for(lambda: condition(pods_in(api, "serving")["small"]), what="reason")
        assert reason["status"] == "False"
        deadline = sched.cycles + 5
        wait_for(lambda: sched.cycles >= deadline, what="cycles")
        node = _node(api)
        assert not node["spec"].get("unschedulable")
        assert "gpucarve.io/mig-change" not in node["metadata"].get("annotations", {})
        # only the static configuration is there: no change was handed over
        status, cm = api.call("GET", f"/api/v1/namespaces/{CM_NS}/configmaps/{CM_NAME}")
        assert status == 200
        assert set(yaml.safe_load(cm["data"]["config.yaml"])["mig-configs"]) == {"gpucarve-inf"}
        assert NODE in sched.mig.unmanaged


def test_a_restarted_scheduler_finishes_a_change_in_flight(
    stack: tuple[LocalStack, Api, Path],
) -> None:
    """The scheduler starts a change and stops before the MIG manager answers; the change is
    recorded on the node, so a new scheduler (as after a crash or a Lease handover) carries it
    through: the node ends uncordoned with the new layout and the pods bound."""
    st, api, path = stack
    manager = MigManagerStandIn(api, CM_NS, CM_NAME, {NODE: [{"7g.80gb": 1}] * 2})
    for name in manager.gpus:  # the node is managed, but the manager is slow to act
        manager.set_labels(name, {"nvidia.com/mig.config.state": "success"})
    with _run(st, api, path, fail=False, manager_runs=False):
        create_pod(api, pod("serving", "small", "nvidia.com/mig-1g.10gb"))

        def cordoned_for_change() -> dict[str, Any] | None:
            n = _node(api)
            labelled = n["metadata"]["labels"].get("nvidia.com/mig.config", "")
            mid = "gpucarve.io/mig-change" in n["metadata"].get("annotations", {})
            return n if mid and labelled.startswith("gpucarve-inf-") else None

        node = wait_for(cordoned_for_change, timeout_s=60, what="a change in flight")
        assert node["spec"].get("unschedulable")
    # the first scheduler is gone; the MIG manager gets to it now, and a new scheduler starts
    with _run(st, api, path, fail=False):
        small = wait_for(
            lambda: node_of(pods_in(api, "serving").get("small") or {}),
            timeout_s=60,
            what="bound by the second scheduler",
        )
        assert small == NODE

        def finished() -> dict[str, Any] | None:
            n = _node(api)
            mid = "gpucarve.io/mig-change" in n["metadata"].get("annotations", {})
            return None if mid or n["spec"].get("unschedulable") else n

        node = wait_for(finished, what="the change finished")
        assert "gpucarve.io/mig-layout" in node["metadata"]["annotations"]


def test_a_cordoned_node_is_not_repartitioned_until_uncordoned(
    stack: tuple[LocalStack, Api, Path],
) -> None:
    """An administrator's cordon: new instances there would serve nobody, so nothing changes
    (the pod says why it waits); once uncordoned, the change runs and the pod binds."""
    st, api, path = stack

    def cordon(value: bool | None) -> None:
        status, reply = api.call(
            "PATCH",
            f"/api/v1/nodes/{NODE}",
            {"spec": {"unschedulable": value}},
            "application/merge-patch+json",
        )
        assert status == 200, reply

    cordon(True)
    with _run(st, api, path, fail=False) as (sched, manager):
        create_pod(api, pod("serving", "small", "nvidia.com/mig-1g.10gb"))
        wait_for(lambda: condition(pods_in(api, "serving")["small"]), what="a reason")
        later = sched.cycles + 5
        wait_for(lambda: sched.cycles >= later, what="cycles")
        assert manager.applied == []
        assert "gpucarve.io/mig-change" not in _node(api)["metadata"].get("annotations", {})
        cordon(None)
        bound = wait_for(
            lambda: node_of(pods_in(api, "serving").get("small") or {}),
            timeout_s=60,
            what="bound once uncordoned",
        )
        assert bound == NODE
        assert [a.state for a in manager.applied] == ["success"]


def test_the_static_configurations_are_published_for_the_gpu_operator(
    stack: tuple[LocalStack, Api, Path],
) -> None:
    from gpucarve.render.migparted import mig_parted_config

    st, api, path = stack
    want = mig_parted_config(load_policy(path, []).policy)["mig-configs"]
    assert set(want) == {"gpucarve-inf"}

    def published() -> dict[str, Any] | None:
        status, cm = api.call("GET", f"/api/v1/namespaces/{CM_NS}/configmaps/{CM_NAME}")
        if status != 200:
            return None
        return dict(yaml.safe_load(cm["data"]["config.yaml"])["mig-configs"])

    with _run(st, api, path, fail=False, manager_runs=False):
        configs = wait_for(published, what="the static configuration published")
    assert configs["gpucarve-inf"] == want["gpucarve-inf"]


def _drain_doc(drain: bool) -> dict[str, Any]:
    """The engine's drain scenario (tests/engine/test_drain.py) with GPU-unit quotas: every
    A100 starts 3g.40gb + 2g.20gb + 2 × 1g.10gb; queues hold GPUs of the unit, in eighths."""
    doc = dynamic_mig_doc()
    (p,) = doc["pools"]
    p["mig"] = {
        "layout": {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2},
        "dynamic": {"minSecondsBetweenChanges": 0, "maxGpusPerCycle": 2, "drain": drain},
    }
    doc["queues"] = [
        {"name": "serving", "namespaces": ["serving"], "quota": {"a100": {"nominal": 1.75}}},
        {"name": "other", "namespaces": ["other"], "quota": {"a100": {"nominal": 0.25}}},
    ]
    return doc


@pytest.mark.parametrize("drain", [True, False])
def test_a_drained_gpu_is_reshaped_for_the_work_a_unit_quota_admits(
    tmp_path: Path, drain: bool
) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(_drain_doc(drain)))
    layout = [{"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}] * 2
    with LocalStack(find_binaries(), tmp_path / "stack", path) as st:
        api = Api(st.server, st.tokens[ADMIN_USER])
        populate(st, api, path, ("serving", "other", CM_NS))
        # the Queue objects carry the unit quotas as written (GPUs, fractions allowed)
        queue = api.get("/apis/gpucarve.io/v1alpha1/queues/serving")
        assert queue["spec"]["quota"] == {"a100": {"nominal": 1.75}}
        policy = load_policy(path, []).policy
        manager = MigManagerStandIn(api, CM_NS, CM_NAME, {NODE: layout})
        manager.start()
        mig = HandoffConfig(CM_NS, CM_NAME, propagation_s=0.5, timeout_s=60)
        config = SchedulerConfig(interval_s=0.3, mig=mig)
        try:
            with running(Scheduler(Client.from_kubeconfig(st.kubeconfig()), policy, config)):
                create_pod(api, pod("serving", "long", "nvidia.com/mig-3g.40gb"))
                create_pod(api, pod("serving", "short", "nvidia.com/mig-1g.10gb"))
                for name in ("long", "short"):
                    wait_for(lambda n=name: node_of(pods_in(api, "serving").get(n) or {}),
                             what=f"{name} bound")  # fmt: skip
            busy = _gpu_of(pods_in(api, "serving")["long"])
            assert _gpu_of(pods_in(api, "serving")["short"]) == busy, "not packed"
            # the three arrive together, as in the engine's scenario: with the scheduler
            # stopped, so that its first cycle sees all of them (one at a time, the first
            # would take the idle GPU's 3g.40gb before the demand for more existed)
            for i in range(3):
                create_pod(api, pod("serving", f"big{i}", "nvidia.com/mig-3g.40gb"))
            with running(Scheduler(Client.from_kubeconfig(st.kubeconfig()), policy, config)):

                def two_bound() -> dict[str, dict[str, Any]] | None:
                    pods = pods_in(api, "serving")
                    done = [n for n in ("big0", "big1", "big2") if node_of(pods.get(n) or {})]
                    return pods if len(done) >= (2 if drain else 1) else None

                pods = wait_for(two_bound, timeout_s=60, what="3g.40gb pods bound")
                time.sleep(1.5)  # a few more cycles: nothing else changes
                pods = pods_in(api, "serving")
                bound = sorted(n for n in ("big0", "big1", "big2") if node_of(pods[n]))
                status = wait_for(
                    lambda: (
                        api.get("/apis/gpucarve.io/v1alpha1/queues/serving")
                        .get("status", {})
                        .get("usage", {})
                        .get("a100")
                    ),
                    what="queue status",
                )
        finally:
            manager.close()
    if drain:
        # the idle GPU took no pod in its old layout: it became 2 × 3g.40gb, then took two
        (done,) = manager.applied
        assert done.state == "success"
        (changed,) = done.changed_gpus
        assert {changed} != busy
        assert bound == ["big0", "big1"]
        assert all(_gpu_of(pods[n]) == {changed} for n in bound)
        assert status == 0.5 + 0.125 + 1.0
    else:
        # refilled in its old layout: one 3g.40gb, no change
        assert not manager.applied
        assert bound == ["big0"]
        assert status == 0.5 + 0.125 + 0.5


def test_helm_install_after_a_cli_trial_keeps_the_trials_mig_config_map(
    stack: tuple[LocalStack, Api, Path],
) -> None:
    """A scheduler run from the CLI created the MIG manager's ConfigMap; the real `helm install`
    (and `helm upgrade`) of the chart then succeeds and leaves it, with what it holds."""
    from tests.integration.chart import CHART, helm

    st, api, path = stack
    with _run(st, api, path, fail=False, manager_runs=False):
        wait_for(
            lambda: api.call("GET", f"/api/v1/namespaces/{CM_NS}/configmaps/{CM_NAME}")[0] == 200,
            what="the trial's ConfigMap",
        )
    before = api.get(f"/api/v1/namespaces/{CM_NS}/configmaps/{CM_NAME}")["data"]
    args = ["--namespace", "gpucarve-system", "--create-namespace", "--kubeconfig",
            str(st.kubeconfig()), "--set-file", f"policy={path}", "--set", "webhook.enabled=false",
            "--set", "nodeAgent.enabled=false", "--set", f"migHandoff.namespace={CM_NS}",
            "--set", f"migHandoff.configMap={CM_NAME}"]  # fmt: skip
    for verb in ("install", "upgrade"):
        done = helm(verb, "gpucarve", str(CHART), *args)
        assert done.returncode == 0, done.stderr
    after = api.get(f"/api/v1/namespaces/{CM_NS}/configmaps/{CM_NAME}")["data"]
    assert after == before and "gpucarve-inf" in after["config.yaml"]
    deploy = api.get("/apis/apps/v1/namespaces/gpucarve-system/deployments/gpucarve")
    assert any(f"--mig-config-map={CM_NS}/{CM_NAME}" in a
               for c in deploy["spec"]["template"]["spec"]["containers"]
               for a in c.get("args", []))  # fmt: skip
