"""Reservations on a real API server, and `plan` on the same workloads: a gang that finds no room
reserves the nodes where it fits soonest, judged by the runtimes the pods declare
(their activeDeadlineSeconds); work that ends first still runs there, work that would delay the
gang waits (so does work that only claims to end first), and the gang binds once the work it
waits for is gone. The engine's side of the
same scenario (what `plan` and `simulate` run) is
tests/engine/test_reservations.py::test_the_api_servers_scenario_in_the_engine."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpucarve.config.policy_build import load_policy
from gpucarve.config.workload_spec import build_workload
from gpucarve.core.runtime import MIN_SAMPLES
from gpucarve.core.vocabulary import EXPECTED_RUNTIME_ANNOTATION
from gpucarve.devcluster.stack import ADMIN_USER, LocalStack, find_binaries
from tests.integration.api import Api, wait_for
from tests.integration.kube_pods import (
    completing,
    condition,
    create_pod,
    install_coscheduling_crd,
    node_of,
    pod,
    pod_group,
    pods_in,
)
from tests.integration.stack_setup import policy_in, populate, scheduling

pytestmark = pytest.mark.integration

POLICY = {
    "apiVersion": "gpucarve.io/v1alpha1",
    "kind": "Policy",
    "metadata": {"name": "reserve"},
    "pools": [
        {
            "name": "train",
            "gpuModel": "H100-SXM5-80GB",
            "nodes": 2,
            "gpusPerNode": 8,
            "sharing": "exclusive",
        },
    ],
    "cohorts": [{"name": "lab"}],
    "queues": [
        {
            "name": "research",
            "namespaces": ["research"],
            "cohort": "lab",
            "quota": {"h100-full": {"nominal": 12}},
        },
        {
            "name": "other",
            "namespaces": ["other"],
            "cohort": "lab",
            "quota": {"h100-full": {"nominal": 4, "borrowingLimit": 8}},
        },
    ],
    "scheduling": {"minRuntimeSeconds": 0, "reserveAfterSeconds": 0},
}


@pytest.fixture(scope="module")
def policy_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return policy_in(tmp_path_factory, POLICY)


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, policy_file: Path
) -> Iterator[tuple[LocalStack, Api]]:
    with LocalStack(find_binaries(), tmp_path_factory.mktemp("reserve"), policy_file) as stack:
        api = Api(stack.server, stack.tokens[ADMIN_USER])
        populate(stack, api, policy_file, ["research", "other"])
        install_coscheduling_crd(api)
        yield stack, api


def timed(manifest: dict[str, Any], seconds: int) -> dict[str, Any]:
    """A pod the kubelet stops after `seconds` (activeDeadlineSeconds): it ends by then."""
    manifest["spec"]["activeDeadlineSeconds"] = seconds
    return manifest


def claiming(manifest: dict[str, Any], seconds: str) -> dict[str, Any]:
    """A pod that only says how long it runs (nothing stops it then)."""
    manifest["metadata"]["annotations"] = {EXPECTED_RUNTIME_ANNOTATION: seconds}
    return manifest


def _bound(api: Api, ns: str, name: str) -> str | None:
    return node_of(pods_in(api, ns).get(name) or {})


def _waits(api: Api, ns: str, name: str) -> str | None:
    c = condition(pods_in(api, ns).get(name) or {})
    return c["message"] if c and c["status"] == "False" else None


def test_a_gang_reserves_where_it_fits_soonest_and_binds_when_that_work_is_gone(
    cluster: tuple[LocalStack, Api], policy_file: Path
) -> None:
    stack, api = cluster
    with scheduling(stack, policy_file) as sched:
        # other runs 4 GPUs for an hour: the gang of two 6-GPU pods cannot fit beside it
        create_pod(api, timed(pod("other", "run", "nvidia.com/gpu", 4), 3600))
        held = wait_for(lambda: _bound(api, "other", "run"), what="other/run bound")
        pod_group(api, "research", "gang", 2)
        for i in range(2):
            create_pod(api, pod("research", f"gang-{i}", "nvidia.com/gpu", 6, group="gang"))
        message = wait_for(
            lambda: (m := _waits(api, "research", "gang-0")) and "reserved" in m and m,
            what="the gang's reservation",
        )
        assert "once 1 running workload(s) end" in message, message
        assert "other/run, by its deadline" in message, message
        # the PodGroup says the same in its status: the nodes kept, when it should fit (the
        # deadline of the work it waits for, an hour from its start)
        group = "/apis/gpucarve.io/v1alpha1/namespaces/research/podgroups/gang"
        held = wait_for(
            lambda: (api.get(group).get("status") or {}).get("reservation"),
            what="the PodGroup's reservation",
        )
        assert held["waitsFor"] == ["other/run"] and len(held["nodes"]) == 2, held
        starts = datetime.fromisoformat(held["expectedStart"].replace("Z", "+00:00"))
        assert timedelta(minutes=55) < starts - datetime.now(UTC) <= timedelta(hours=1), held
        # work that ends before the gang can start runs on the reserved nodes; work that would
        # run past its start waits, though GPUs are free. (Submission times are seconds, as
        # creationTimestamp is: a second later, these are newer than the gang whatever the ids.)
        time.sleep(1.1)
        create_pod(api, timed(pod("other", "quick", "nvidia.com/gpu", 2), 60))
        create_pod(api, timed(pod("other", "late", "nvidia.com/gpu", 4), 7200))
        # a claim binds nothing: a pod that only says it runs a minute is kept off too
        create_pod(api, claiming(pod("other", "liar", "nvidia.com/gpu", 4), "1m"))
        wait_for(lambda: _bound(api, "other", "quick"), what="other/quick bound")
        late = wait_for(
            lambda: (m := _waits(api, "other", "late")) and "by reservation" in m and m,
            what="other/late kept off the reserved nodes",
        )
        assert _bound(api, "other", "late") is None, late
        liar = wait_for(lambda: _waits(api, "other", "liar"), what="other/liar's reason")
        assert _bound(api, "other", "liar") is None and "by reservation" in liar, liar
        assert held and _bound(api, "other", "quick") is not None
        # the scheduler exports why the reserved GPUs sit free, as the simulator sums it
        idle = wait_for(
            lambda: _idle_seconds(sched.metrics.registry, "reservation"),
            what="idle GPU-seconds kept for the reservation",
        )
        assert idle > 0
        # the work it waited for ends: the gang binds, before other/late
        api.call("DELETE", "/api/v1/namespaces/other/pods/run?gracePeriodSeconds=0")
        wait_for(
            lambda: all(_bound(api, "research", f"gang-{i}") for i in range(2)),
            what="the gang bound",
        )
        assert _bound(api, "other", "late") is None
        wait_for(
            lambda: "reservation" not in (api.get(group).get("status") or {}),
            what="the reservation gone from the PodGroup once the gang is placed",
        )


def _idle_seconds(registry: CollectorRegistry, cause: str) -> float:
    text = generate_latest(registry).decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "gpucarve_idle_gpu_seconds_total" and sample.labels == {
                "pool": "train",
                "cause": cause,
            }:
                return float(sample.value)
    return 0.0


def test_the_scheduler_learns_how_long_work_of_a_kind_runs_from_pods_that_succeeded(
    cluster: tuple[LocalStack, Api], policy_file: Path
) -> None:
    stack, api = cluster
    with scheduling(stack, policy_file) as sched:
        for i in range(MIN_SAMPLES):
            create_pod(api, _completing(api, f"done-{i}"))
        names = [f"done-{i}" for i in range(MIN_SAMPLES)]
        wait_for(
            lambda: all(_phase(api, n) == "Succeeded" for n in names), what="the pods succeeded"
        )
        # a workload of the same kind (queue, priority, one pod of one GPU) is now expected
        # to run about as long as those did
        kind = build_workload(
            {
                "name": "probe",
                "namespace": "other",
                "podSets": [{"name": "set-0", "count": 1, "resources": _ONE_GPU}],
            },
            load_policy(policy_file).policy,
        )[0]
        assert kind is not None
        learned = wait_for(
            lambda: (s := sched.runtimes.book.learned(kind)) is not None and (s,),
            what="a runtime learned from the pods that succeeded",
        )
        assert 0 <= learned[0] <= 120


_ONE_GPU = {"requests": {"cpu": "1", "nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}


def _phase(api: Api, name: str) -> str | None:
    got: str | None = ((pods_in(api, "other").get(name) or {}).get("status") or {}).get("phase")
    return got


def _completing(api: Api, name: str) -> dict[str, Any]:
    """A one-GPU pod that the kwok node completes a second after it starts."""
    return completing(api, pod("other", name, "nvidia.com/gpu", 1), 1)
