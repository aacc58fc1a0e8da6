"""Reclaim's options on the real API server. Its grace (the scenario of
tests/engine/test_reclaim_grace.py): a borrowed pod whose activeDeadlineSeconds ends it within
the grace is not evicted for the queue that lends; that queue's pod waits, saying for what, and
binds once the pod is gone. Sparing large gangs (tests/engine/test_reservations.py, the same
scenario): a 1-GPU reclaimer takes the small borrowed pod, not the 6-GPU one that has run less.
And a PodDisruptionBudget does not keep the lenders from their nominal quota for ever: once a
borrowed pod's budget has refused reclaim's eviction for
`scheduling.reclaimPastBudgetAfterSeconds` the pod is deleted (a DisruptionTarget condition and
a ReclaimedPastBudget Event), while priority preemption inside one queue honours the budget for
good. Which pods reclaim takes is the engine's decision, the one `plan` and `simulate` make;
budgets exist only on the API server."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
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
    "metadata": {"name": "grace"},
    "pools": [
        {"name": "train", "gpuModel": "H100-SXM5-80GB", "nodes": 1, "gpusPerNode": 8,
         "sharing": "exclusive"},
    ],
    "cohorts": [{"name": "lab"}],
    "queues": [
        {"name": "owner", "namespaces": ["owner"], "cohort": "lab",
         "quota": {"h100-full": {"nominal": 8}}, "priorityClasses": ["low", "high"]},
        {"name": "borrower", "namespaces": ["borrower"], "cohort": "lab",
         "quota": {"h100-full": {"nominal": 0, "borrowingLimit": 8}}},
    ],
    "priorityClasses": [
        {"name": "low", "value": 10, "preemptible": True, "default": True},
        {"name": "high", "value": 100, "preemptible": True},
    ],
    "scheduling": {"minRuntimeSeconds": 0, "reclaimGraceSeconds": 3600},
}  # fmt: skip


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[LocalStack, Api, Path]]:
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(yaml.safe_dump(POLICY))
    with populated(tmp_path, policy_file, ["owner", "borrower"]) as both:
        yield both


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
        said = _explain(stack, policy_file, "owner/mine")  # explain says the same
        assert "reclaim put off: borrower/soon" in said and "by its deadline" in said, said
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


PAST_S = 3
PAST_BUDGET: dict[str, Any] = {
    **POLICY,
    "metadata": {"name": "past-budget"},
    "scheduling": {"minRuntimeSeconds": 0, "reclaimPastBudgetAfterSeconds": PAST_S},
}


def _kept(api: Api, ns: str, name: str, gpus: int, priority: str | None = None) -> None:
    """A pod under a budget that never allows a disruption (no disruption controller runs
    here, so the budget is never processed and refuses always), bound and Running: the
    Eviction API passes over a budget for a pod that is not running, and nothing runs it."""
    manifest = pod(ns, name, "nvidia.com/gpu", gpus, priority_class=priority)
    manifest["metadata"]["labels"]["budget"] = name
    manifest["spec"]["terminationGracePeriodSeconds"] = 5
    create_pod(api, manifest)
    wait_for(lambda: node_of(pods_in(api, ns)[name]), what=f"{name} bound")
    path = f"/api/v1/namespaces/{ns}/pods/{name}/status"
    code, _ = api.call("PATCH", path, {"status": {"phase": "Running"}},
                       "application/merge-patch+json")  # fmt: skip
    assert code == 200
    api.create(f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets", {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"budget": name}}},
    })  # fmt: skip


@contextmanager
def _past_budget(cluster: tuple[LocalStack, Api, Path]) -> Iterator[Api]:
    """The scheduler by `PAST_BUDGET` on the module's stack, while the block runs."""
    stack, api, policy_file = cluster
    policy_file.write_text(yaml.safe_dump(PAST_BUDGET))
    with scheduling(stack, policy_file):
        yield api


def _reason(api: Api, ns: str, name: str) -> str | None:
    c = condition(pods_in(api, ns).get(name) or {})
    return c["message"] if c and c["status"] == "False" else None


def _events(api: Api, ns: str, name: str, reason: str) -> list[dict[str, Any]]:
    items = api.get(f"/api/v1/namespaces/{ns}/events")["items"]
    return [e for e in items if e["reason"] == reason and e["involvedObject"]["name"] == name]


def test_reclaim_deletes_a_borrowed_pod_its_budget_keeps_past_the_bound(
    cluster: tuple[LocalStack, Api, Path],
) -> None:
    with _past_budget(cluster) as api:
        _kept(api, "borrower", "kept", 4)
        free = pod("borrower", "free", "nvidia.com/gpu", 4)
        free["spec"]["terminationGracePeriodSeconds"] = 5
        create_pod(api, free)
        wait_for(lambda: node_of(pods_in(api, "borrower")["free"]), what="free bound")
        create_pod(api, pod("owner", "mine", "nvidia.com/gpu", 8))
        message = wait_for(lambda: _reason(api, "owner", "mine"), what="mine's reason")
        # the pod without a budget went at once; the one under it stays for now
        assert message == (
            "preemption/refused: the eviction of borrower/kept was refused (a "
            "PodDisruptionBudget); asked again in 10 s; reclaim deletes it once its "
            f"budget has refused for {PAST_S} s (scheduling.reclaimPastBudgetAfterSeconds)"
        ), message
        refused_at = time.monotonic()

        def evicted() -> bool:
            got = pods_in(api, "borrower").get("free")
            return got is None or bool(got["metadata"].get("deletionTimestamp"))

        wait_for(evicted, what="free evicted")
        assert not pods_in(api, "borrower")["kept"]["metadata"].get("deletionTimestamp")

        def deleted() -> dict[str, Any] | None:
            got = pods_in(api, "borrower").get("kept")
            return got if got and got["metadata"].get("deletionTimestamp") else None

        # asked again after the server's back-off of 10 s, by then past the bound: deleted
        terminating = wait_for(deleted, what="kept deleted past its budget", timeout_s=30)
        assert time.monotonic() - refused_at >= PAST_S
        (target,) = [c for c in terminating["status"]["conditions"]
                     if c["type"] == "DisruptionTarget"]  # fmt: skip
        assert (target["status"], target["reason"]) == ("True", "PreemptionByScheduler")
        (event,) = _events(api, "borrower", "kept", "ReclaimedPastBudget")
        assert event["type"] == "Warning"
        assert "its PodDisruptionBudget refused the eviction for " in event["message"]
        assert f"reclaimPastBudgetAfterSeconds is {PAST_S}: deleted" in event["message"]
        assert _events(api, "borrower", "free", "Preempted")
        # the kwok node ends it within its grace period; then the lender's pod binds
        wait_for(lambda: node_of(pods_in(api, "owner")["mine"]), what="mine bound", timeout_s=30)
        assert "kept" not in pods_in(api, "borrower")


def test_priority_preemption_inside_a_queue_honours_a_budget_for_good(
    cluster: tuple[LocalStack, Api, Path],
) -> None:
    with _past_budget(cluster) as api:
        _kept(api, "owner", "low", 8, "low")
        create_pod(api, pod("owner", "urgent", "nvidia.com/gpu", 8, priority_class="high"))
        message = wait_for(lambda: _reason(api, "owner", "urgent"), what="urgent's reason")
        assert message == (
            "preemption/refused: the eviction of owner/low was refused (a "
            "PodDisruptionBudget); asked again in 10 s"
        ), message
        time.sleep(10 + PAST_S + 2)  # asked again past the reclaim bound: still refused
        low = pods_in(api, "owner")["low"]
        assert not low["metadata"].get("deletionTimestamp")
        assert node_of(pods_in(api, "owner")["urgent"]) is None
        assert _reason(api, "owner", "urgent") == message


def _explain(stack: LocalStack, policy_file: Path, pod_id: str) -> str:
    from typer.testing import CliRunner

    from gpucarve.cli.main import app

    args = ["explain", pod_id, "--policy", str(policy_file), "--kubeconfig",
            str(stack.kubeconfig())]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return str(result.stdout)


def test_sparing_and_a_jobs_deadline_are_what_explain_says(
    cluster: tuple[LocalStack, Api, Path],
) -> None:
    """The stack as shipped (webhook, Job controller): a gang Job on loan whose own
    activeDeadlineSeconds bounds it, and a 1-GPU pod of the lender that reclaim may not take
    it for (8 GPUs, more than 4 times 1): the pod's reason and `gpucarve explain` name the
    sparing and the time left; explain of the Job's pod says its runtime comes from the Job's
    deadline."""
    stack, api, policy_file = cluster
    doc = {**POLICY, "scheduling": {"minRuntimeSeconds": 0, "reclaimLargeVictimRatio": 4,
                                    "reclaimLargeVictimAfterSeconds": 3600}}  # fmt: skip
    policy_file.write_text(yaml.safe_dump(doc))
    spec = {**pod("borrower", "x", "nvidia.com/gpu", 4)["spec"], "restartPolicy": "Never"}
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "sweep", "namespace": "borrower"},
           "spec": {"parallelism": 2, "completions": 2, "activeDeadlineSeconds": 5400,
                    "template": {"spec": spec}}}  # fmt: skip
    del job["spec"]["template"]["spec"]["schedulerName"]  # the webhook sets it
    with scheduling(stack, policy_file):
        api.create("/apis/batch/v1/namespaces/borrower/jobs", job)

        def job_pods() -> list[str] | None:
            pods = pods_in(api, "borrower")
            bound = [n for n, p in pods.items() if n.startswith("sweep-") and node_of(p)]
            return sorted(bound) if len(bound) == 2 else None

        names = wait_for(job_pods, what="the Job's two pods bound together")
        said = _explain(stack, policy_file, f"borrower/{names[0]}")
        assert "expected to run 5400 s, by its deadline" in said, said
        create_pod(api, pod("owner", "one", "nvidia.com/gpu", 1))
        message = wait_for(lambda: (m := _reason(api, "owner", "one")) and "spares" in m and m,
                           what="the sparing reason")  # fmt: skip
        assert message.startswith("preemption/reclaim-sparing: reclaim spares borrower/job-sweep")
        assert "8 slices, more than 4 times the 1" in message, message
        said = _explain(stack, policy_file, "owner/one")
        assert "reclaim spares borrower/job-sweep" in said and "may be reclaimed in" in said, said
        assert "possible now" not in said, said


def test_a_preemption_waiting_for_the_minimum_runtime_says_so_on_the_api_server(
    cluster: tuple[LocalStack, Api, Path],
) -> None:
    """The engine's min-runtime reason through the scheduler, in the stack as shipped: the
    high-priority pod's condition and `gpucarve explain` name the victim and the time left,
    with no quota advice (tests/engine/test_extension_points.py is the same scenario)."""
    stack, api, policy_file = cluster
    policy_file.write_text(yaml.safe_dump({**POLICY, "scheduling": {"minRuntimeSeconds": 3600}}))
    with scheduling(stack, policy_file):
        create_pod(api, pod("owner", "low", "nvidia.com/gpu", 8, priority_class="low"))
        wait_for(lambda: node_of(pods_in(api, "owner")["low"]), what="low bound")
        create_pod(api, pod("owner", "urgent", "nvidia.com/gpu", 8, priority_class="high"))
        message = wait_for(
            lambda: (m := _reason(api, "owner", "urgent")) and "min-runtime" in m and m,
            what="urgent's reason",
        )
        assert message.startswith("preemption/min-runtime: waits to preempt owner/low"), message
        assert "minimum runtime of 3600 s" in message and "preemptible in" in message, message
        said = _explain(stack, policy_file, "owner/urgent")
        assert "waits to preempt owner/low" in said and "preemptible in" in said, said
        assert "raise nominal" not in said, said
        assert not pods_in(api, "owner")["low"]["metadata"].get("deletionTimestamp")


BOUND_S = 15
BOUNDED: dict[str, Any] = {
    **POLICY,
    "metadata": {"name": "bounded"},
    "queues": [{**POLICY["queues"][0], "reclaimWaitSeconds": BOUND_S}, POLICY["queues"][1]],
}


def test_a_queues_wait_bound_cuts_reclaims_grace_short_on_the_api_server(
    cluster: tuple[LocalStack, Api, Path],
) -> None:
    """tests/engine/test_reclaim_wait_bound.py's grace scenario through `apply` and the
    scheduler: the Queue carries the bound; the lender's pod waits for the borrowed pod whose
    deadline ends it within the bound (kwok never stops it: it overruns) only until it has
    waited its queue's reclaimWaitSeconds, then reclaim evicts it (the hour's grace alone keeps
    the lender waiting: test_borrowed_work_about_to_end_is_waited_for_not_evicted); its reason
    and `gpucarve explain` name the bound."""
    stack, api, policy_file = cluster
    policy_file.write_text(yaml.safe_dump(BOUNDED))
    args = ["apply", "--policy", str(policy_file), "--kubeconfig", str(stack.kubeconfig())]
    from typer.testing import CliRunner

    from gpucarve.cli.main import app

    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    owner = api.get("/apis/gpucarve.io/v1alpha1/queues/owner")
    assert owner["spec"]["reclaimWaitSeconds"] == BOUND_S
    with scheduling(stack, policy_file):
        soon = pod("borrower", "soon", "nvidia.com/gpu", 8)
        soon["spec"]["activeDeadlineSeconds"] = 10  # within the bound: waited for, up to it
        soon["spec"]["terminationGracePeriodSeconds"] = 1
        create_pod(api, soon)
        wait_for(lambda: node_of(pods_in(api, "borrower")["soon"]), what="the borrower bound")
        create_pod(api, pod("owner", "mine", "nvidia.com/gpu", 8))
        asked = time.monotonic()
        message = wait_for(lambda: (m := _reason(api, "owner", "mine")) and "put off" in m and m,
                           what="why mine waits")  # fmt: skip
        assert message.startswith("preemption/reclaim-grace: reclaim put off"), message
        assert "queue owner's reclaimWaitSeconds" in message, message
        assert f"up to {BOUND_S}s from its submission" in message, message
        said = _explain(stack, policy_file, "owner/mine")
        assert "queue owner's reclaimWaitSeconds" in said, said
        wait_for(lambda: node_of(pods_in(api, "owner")["mine"]), what="mine bound", timeout_s=40)
        assert time.monotonic() - asked >= BOUND_S - 1  # not before its bound (a cycle's slack)
        assert "soon" not in pods_in(api, "borrower") or pods_in(api, "borrower")["soon"][
            "metadata"
        ].get("deletionTimestamp")
