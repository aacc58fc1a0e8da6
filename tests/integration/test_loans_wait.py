"""Loans that wait for lenders (scheduling.loansWaitForLenders) on the real API server, the
scenario of tests/engine/test_loans_wait.py: the borrower holds 12 of two nodes' 16 GPUs (8 lent
by the idle lender); the lender's 8-GPU pod, within its nominal quota, finds 4 free GPUs and
cannot reclaim yet (minRuntimeSeconds). A borrower's 4-GPU pod that would take those 4 waits,
its condition naming the lender; once the lender's pod is gone it binds."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucarve.devcluster.stack import LocalStack
from tests.integration.api import Api, wait_for
from tests.integration.kube_pods import condition, create_pod, node_of, pod, pods_in
from tests.integration.stack_setup import populated, scheduling

pytestmark = pytest.mark.integration

POLICY: dict[str, Any] = {
    "apiVersion": "gpucarve.io/v1alpha1",
    "kind": "Policy",
    "metadata": {"name": "loans-wait"},
    "pools": [
        {"name": "train", "gpuModel": "H100-SXM5-80GB", "nodes": 2, "gpusPerNode": 8,
         "sharing": "exclusive"},
    ],
    "cohorts": [{"name": "lab"}],
    "queues": [
        {"name": "lender", "namespaces": ["lender"], "cohort": "lab",
         "quota": {"h100-full": {"nominal": 12}}},
        {"name": "borrower", "namespaces": ["borrower"], "cohort": "lab",
         "quota": {"h100-full": {"nominal": 4, "borrowingLimit": 12}}},
    ],
    "scheduling": {"minRuntimeSeconds": 3600, "loansWaitForLenders": True},
}  # fmt: skip


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[LocalStack, Api, Path]]:
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(yaml.safe_dump(POLICY))
    with populated(tmp_path, policy_file, ["lender", "borrower"]) as both:
        yield both


def _waiting(api: Api, ns: str, name: str) -> str | None:
    c = condition(pods_in(api, ns).get(name) or {})
    return c["message"] if c and c["status"] == "False" else None


def test_a_loan_waits_while_the_lenders_own_work_waits_for_its_quota(
    cluster: tuple[LocalStack, Api, Path],
) -> None:
    stack, api, policy_file = cluster
    with scheduling(stack, policy_file):
        for name, gpus in (("big", 8), ("small", 4)):
            create_pod(api, pod("borrower", name, "nvidia.com/gpu", gpus))
            wait_for(lambda n=name: node_of(pods_in(api, "borrower")[n]), what=f"{name} bound")
        create_pod(api, pod("lender", "mine", "nvidia.com/gpu", 8))
        wait_for(lambda: _waiting(api, "lender", "mine"), what="the lender's pod pending")
        create_pod(api, pod("borrower", "more", "nvidia.com/gpu", 4))
        message = wait_for(
            lambda: (m := _waiting(api, "borrower", "more")) and "kept for work" in m and m,
            what="the loan's reason",
        )
        assert "8 more kept for work of queue lender that waits within its nominal" in message
        time.sleep(2)  # a few more cycles: 4 GPUs are free, and still not lent
        assert node_of(pods_in(api, "borrower")["more"]) is None
        api.call("DELETE", "/api/v1/namespaces/lender/pods/mine?gracePeriodSeconds=0")
        wait_for(lambda: node_of(pods_in(api, "borrower")["more"]), what="the loan made")
