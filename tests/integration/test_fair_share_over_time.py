"""Fair share over time on the real API server, in the stack as shipped: a queue that borrowed
the cohort yields to one that did not, and the order holds across a restart of the scheduler,
which goes on from the usage the Queues' statuses keep (scheduling.usageHalfLifeSeconds)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpucarve.cli.main import app
from gpucarve.devcluster.stack import LocalStack
from tests.integration.api import Api, wait_for
from tests.integration.kube_pods import create_pod, delete_all, node_of, pod, pods_in
from tests.integration.stack_setup import policy_in, populated, scheduling

pytestmark = pytest.mark.integration

# `owner` lends its quota and asks for nothing: what batch and serve borrow is its
NAMESPACES = ["batch", "serve", "owner"]
HALF_LIFE_S = 120

POLICY: dict[str, Any] = {
    "apiVersion": "gpucarve.io/v1alpha1",
    "kind": "Policy",
    "metadata": {"name": "over-time"},
    "pools": [
        {
            "name": "gpus",
            "gpuModel": "H100-SXM5-80GB",
            "nodes": 3,
            "gpusPerNode": 8,
            "sharing": "exclusive",
            "nodeLabels": {"gpucarve.io/pool": "gpus"},
        }
    ],
    "cohorts": [{"name": "all"}],
    "queues": [
        {"name": q, "namespaces": [q], "cohort": "all", "quota": {"h100-full": {"nominal": 8}}}
        for q in NAMESPACES
    ],
    "scheduling": {"minRuntimeSeconds": 0, "usageHalfLifeSeconds": HALF_LIFE_S},
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalStack, Api, Path]]:
    policy_file = policy_in(tmp_path_factory, POLICY)
    with populated(tmp_path_factory.mktemp("fair"), policy_file, NAMESPACES) as parts:
        yield parts


def _fair_share(api: Api, queue: str) -> dict[str, int]:
    status = api.get(f"/apis/gpucarve.io/v1alpha1/queues/{queue}").get("status") or {}
    return dict(status.get("fairShare") or {})


def _bound(api: Api, ns: str) -> list[str]:
    return sorted(n for n, p in pods_in(api, ns).items() if node_of(p))


def test_the_queue_that_borrowed_yields_after_a_restart(
    stack: tuple[LocalStack, Api, Path],
) -> None:
    kube, api, policy_file = stack
    with scheduling(kube, policy_file):
        # batch holds two nodes: a third of the cohort is borrowed from owner
        for name in ("n0", "n1"):
            create_pod(api, pod("batch", name, "nvidia.com/gpu", 8))
        wait_for(lambda: _bound(api, "batch") == ["n0", "n1"], what="batch's pods bound")
        # held a while: its decayed share grows towards the third it holds
        wait_for(
            lambda: _fair_share(api, "batch").get("decayedShare", 0) >= 20_000,
            what="batch's borrowing in its Queue's status",
        )
        assert _fair_share(api, "batch")["heldShare"] == 333_333
        delete_all(api, ["batch"])
        # the book in the status: batch's borrowing decayed but not gone, none held now
        kept = wait_for(
            lambda: (
                (f := _fair_share(api, "batch")).get("heldShare") == 0
                and f.get("decayedShare", 0) > 0
                and f
            ),
            what="batch's borrowing ended in its Queue's status",
        )
        assert kept["asOf"] > 1_700_000_000  # seconds since 1970, not since a process began
        assert _fair_share(api, "serve").get("decayedShare", 0) == 0
    # no scheduler runs: batch and serve each ask for two nodes: each gets one within its
    # quota, and one of them borrows owner's node (pods made before the scheduler started
    # count as submitted when it started, so the queues' names break the tie: batch's first)
    for name in ("m0", "m1"):
        create_pod(api, pod("batch", name, "nvidia.com/gpu", 8))
    for name in ("m0", "m1"):
        create_pod(api, pod("serve", name, "nvidia.com/gpu", 8))
    try:
        with scheduling(kube, policy_file):
            # a new scheduler, which only knows batch's past from the Queues' statuses:
            # serve borrows (by submission and name alone, batch would)
            wait_for(
                lambda: len(_bound(api, "serve") + _bound(api, "batch")) == 3,
                what="three pods bound",
            )
            bound = {"serve": _bound(api, "serve"), "batch": _bound(api, "batch")}
            assert bound == {"serve": ["m0", "m1"], "batch": ["m0"]}, bound
            assert sorted(pods_in(api, "batch")) == ["m0", "m1"]  # m1 waits, never evicted
        # `gpucarve explain` on the cluster reads the same book from the Queues' statuses
        args = ["explain", "batch/m1", "--policy", str(policy_file)]
        result = CliRunner().invoke(app, [*args, "--kubeconfig", str(kube.kubeconfig())])
        assert result.exit_code == 0, result.output
        (line,) = [x for x in result.stdout.splitlines() if "borrowed recently" in x]
        recent = float(line.split(" plus ")[1].split()[0])
        assert recent > 0, line
    finally:
        delete_all(api, NAMESPACES)
