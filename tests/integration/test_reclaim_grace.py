"""Reclaim's grace on the real API server (the scenario of tests/engine/test_reclaim_grace.py):
a borrowed pod whose activeDeadlineSeconds ends it within the grace is not evicted for the
queue that lends; that queue's pod waits, saying for what, and binds once the pod is gone.
And reclaim that spares large gangs (tests/engine/test_reservations.py, the same scenario): a
1-GPU reclaimer takes the small borrowed pod, not the 6-GPU one that has run less."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucarve.devcluster.stack import ADMIN_USER, LocalStack, find_binaries
from tests.integration.api import Api, wait_for
from tests.integration.kube_pods import condition, create_pod, node_of, pod, pods_in
from tests.integration.stack_setup import populate, scheduling

pytestmark = pytest.mark.integration

POLICY: dict[str, Any] = {
    "apiVersion": "gpucarve.io/v1alpha1",
    "kind": "Policy",
    "metadata": {"name": "grace"},
    "pools": [
        {"name": "train", "gpuModel": "H100-SXM5-80GB", "nodes": 1, "gpusPerNode": 8,
         "sharing": "exclusive"},
    ],
    "cohorts": [{"name": "lab"}],
    "queues": [
        {"name": "owner", "namespaces": ["owner"], "cohort": "lab",
         "quota": {"h100-full": {"nominal": 8}}},
        {"name": "borrower", "namespaces": ["borrower"], "cohort": "lab",
         "quota": {"h100-full": {"nominal": 0, "borrowingLimit": 8}}},
    ],
    "scheduling": {"minRuntimeSeconds": 0, "reclaimGraceSeconds": 3600},
}  # fmt: skip


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[LocalStack, Api, Path]]:
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(yaml.safe_dump(POLICY))
    with LocalStack(find_binaries(), tmp_path / "stack") as stack:
        api = Api(stack.server, stack.tokens[ADMIN_USER])
        populate(stack, api, policy_file, ["owner", "borrower"])
        yield stack, api, policy_file


def test_borrowed_work_about_to_end_is_waited_for_not_evicted(
    cluster: tuple[LocalStack, Api, Path],
) -> None:
    stack, api, policy_file = cluster
    with scheduling(stack, policy_file):
        soon = pod("borrower", "soon", "nvidia.com/gpu", 8)
        soon["spec"]["activeDeadlineSeconds"] = 600  # the kubelet stops it within 10 min
        create_pod(api, soon)
        wait_for(lambda: node_of(pods_in(api, "borrower")["soon"]), what="the borrower bound")
        create_pod(api, pod("owner", "mine", "nvidia.com/gpu", 8))

        def waits() -> str | None:
            c = condition(pods_in(api, "owner")["mine"])
            return c["message"] if c and c["status"] == "False" else None

        message = wait_for(lambda: (m := waits()) and "reclaim put off" in m and m, what="why")
        assert message.startswith("preemption/reclaim-grace: reclaim put off"), message
        assert "borrower/soon" in message and "by its deadline" in message, message
        time.sleep(2)  # a few more cycles: still not evicted
        borrowed = pods_in(api, "borrower")["soon"]
        assert not borrowed["metadata"].get("deletionTimestamp"), "evicted within the grace"
        assert node_of(pods_in(api, "owner")["mine"]) is None
        # it ends: the owner's pod binds
        api.call("DELETE", "/api/v1/namespaces/borrower/pods/soon?gracePeriodSeconds=0")
        wait_for(lambda: node_of(pods_in(api, "owner")["mine"]), what="the owner's pod bound")


SPARING: dict[str, Any] = {
    **POLICY,
    "metadata": {"name": "sparing"},
    "scheduling": {"minRuntimeSeconds": 0, "reclaimLargeVictimRatio": 4},
}


def test_reclaim_takes_the_small_borrower_not_the_large_one_for_a_small_reclaimer(
    cluster: tuple[LocalStack, Api, Path],
) -> None:
    """The large one has run less, so cheapest-first alone would take it (`sparing` off, this
    test fails: checked)."""
    stack, api, policy_file = cluster
    policy_file.write_text(yaml.safe_dump(SPARING))
    with scheduling(stack, policy_file):
        create_pod(api, pod("borrower", "small", "nvidia.com/gpu", 2))
        wait_for(lambda: node_of(pods_in(api, "borrower")["small"]), what="small bound")
        time.sleep(8)  # small has run 8 s on 2 GPUs when large starts on 6
        create_pod(api, pod("borrower", "large", "nvidia.com/gpu", 6))
        wait_for(lambda: node_of(pods_in(api, "borrower")["large"]), what="large bound")
        create_pod(api, pod("owner", "one", "nvidia.com/gpu", 1))
        wait_for(lambda: node_of(pods_in(api, "owner")["one"]), what="the owner's pod bound")
        left = pods_in(api, "borrower")
        assert "small" not in left or left["small"]["metadata"].get("deletionTimestamp")
        assert not left["large"]["metadata"].get("deletionTimestamp"), "the large one evicted"
