"""GPUs held but idle, on the real API server with the stack as shipped (the webhook on): a real
Prometheus scrapes a stand-in DCGM exporter that says every GPU of the node sits at 1 %; the
notebooks queue's idleness rule (below 5 % for 60 s warns, for 180 s reclaims) marks both of
its notebooks idle and warns their pods (a GPUIdle Event, and `gpucarve explain` says so
before anything happens); past 180 s, the borrowed notebook goes to a pod of another queue that
waits for its GPUs (an IdleReclaimed Event), while the notebook within the queue's nominal
quota is only warned. The engine's side of the same scenario is tests/engine/test_held_idle.py;
its figures over a trace, `simulate`'s (tests/sim/test_held_idle.py)."""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpucarve.cli.main import app
from gpucarve.core.vocabulary import IDLE_SINCE_ANNOTATION
from gpucarve.dashboard.gpu_use import PrometheusGpuUse
from gpucarve.devcluster.stack import LocalStack
from gpucarve.kube.scheduler.held_idle import ActivityFeed, IdleWatch
from tests.integration.api import Api, wait_for
from tests.integration.dcgm_stand_in import Exporter, prometheus
from tests.integration.kube_pods import create_pod, node_of, pod, pods_in
from tests.integration.stack_setup import populated, scheduling

pytestmark = pytest.mark.integration

# two minutes between the warning and the reclaim: room for explain to be asked in between on
# a loaded CI machine
RULE = {"activityBelow": 5, "warnAfterSeconds": 60, "reclaimAfterSeconds": 180}
POLICY: dict[str, Any] = {
    "apiVersion": "gpucarve.io/v1alpha1",
    "kind": "Policy",
    "metadata": {"name": "held-idle"},
    "pools": [
        {"name": "train", "gpuModel": "H100-SXM5-80GB", "nodes": 1, "gpusPerNode": 8,
         "sharing": "exclusive"},
    ],
    "cohorts": [{"name": "lab"}],
    "queues": [
        {"name": "notebooks", "namespaces": ["notebooks"], "cohort": "lab",
         "quota": {"h100-full": {"nominal": 2, "borrowingLimit": 8}}, "idleness": RULE},
        {"name": "owner", "namespaces": ["owner"], "cohort": "lab",
         "quota": {"h100-full": {"nominal": 6}}},
        {"name": "train", "namespaces": ["train"], "cohort": "lab",
         "quota": {"h100-full": {"nominal": 0, "borrowingLimit": 8}}},
    ],
    "priorityClasses": [{"name": "low", "value": 10, "preemptible": True, "default": True}],
    "scheduling": {"minRuntimeSeconds": 0},
}  # fmt: skip


def _events(api: Api, namespace: str, name: str) -> list[dict[str, Any]]:
    body = api.get(f"/api/v1/namespaces/{namespace}/events")
    return [e for e in body["items"] if e["involvedObject"]["name"] == name]


def _explain(stack: LocalStack, policy_file: Path, pod_id: str) -> str:
    args = ["explain", pod_id, "--policy", str(policy_file), "--kubeconfig",
            str(stack.kubeconfig())]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return str(result.stdout)


def _bound(api: Api, namespace: str, name: str) -> str:
    return str(wait_for(lambda: node_of(pods_in(api, namespace).get(name) or {}),
                        what=f"{namespace}/{name} bound"))  # fmt: skip


def test_idle_borrowed_notebook_is_warned_then_reclaimed_and_one_within_quota_only_warned(
    tmp_path: Path,
) -> None:
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(yaml.safe_dump(POLICY))
    exporter = Exporter()
    namespaces = ["notebooks", "owner", "train"]
    with (
        populated(tmp_path, policy_file, namespaces) as (stack, api, _),
        prometheus(stack.bin_dir, tmp_path, exporter.port) as prom,
        scheduling(stack, policy_file) as sched,
    ):
        feed = ActivityFeed(PrometheusGpuUse(prom, ttl_s=0.5), period_s=1.0)
        sched.idle_watch = IdleWatch(feed)
        feed.start()
        try:
            # the earlier notebook holds the queue's nominal 2 GPUs, the later one borrows
            create_pod(api, pod("notebooks", "within", "nvidia.com/gpu", 2))
            node = _bound(api, "notebooks", "within")
            time.sleep(1.5)  # made at whole seconds: the later one is made a second later
            create_pod(api, pod("notebooks", "borrowed", "nvidia.com/gpu", 2))
            create_pod(api, pod("owner", "own", "nvidia.com/gpu", 4))
            _bound(api, "notebooks", "borrowed")
            _bound(api, "owner", "own")
            exporter.gpus(node, [1] * 8, [512] * 8)  # every GPU of the node at 1 %
            # train borrows too: plain reclaim (for a queue within its nominal) takes nothing
            create_pod(api, pod("train", "job", "nvidia.com/gpu", 2))

            def marked() -> dict[str, str] | None:
                nbs = pods_in(api, "notebooks")
                got = {n: (p["metadata"].get("annotations") or {}).get(IDLE_SINCE_ANNOTATION)
                       for n, p in nbs.items()}  # fmt: skip
                return got if all(got.values()) else None

            marks = wait_for(marked, timeout_s=60, what="both notebooks marked idle")
            assert (
                "own" not in marks
                and (pods_in(api, "owner")["own"]["metadata"].get("annotations") or {}).get(
                    IDLE_SINCE_ANNOTATION
                )
                is None
            )  # no rule for the owner's queue

            def warned(name: str) -> dict[str, Any] | None:
                found = [e for e in _events(api, "notebooks", name) if e["reason"] == "GPUIdle"]
                return found[0] if found else None

            within = wait_for(lambda: warned("within"), timeout_s=90, what="within warned")
            borrowed = wait_for(lambda: warned("borrowed"), timeout_s=30, what="borrowed warned")
            assert within["type"] == "Warning" and "only warned" in within["message"]
            assert "nominal quota" in within["message"], within["message"]
            assert "below 5% activity" in borrowed["message"], borrowed["message"]
            # explain says it too, before anything is done
            said = _explain(stack, policy_file, "notebooks/borrowed")
            assert "idle: its GPUs below 5% activity" in said, said
            said = _explain(stack, policy_file, "notebooks/within")
            assert "only warned" in said and "withinQuota: warn" in said, said

            job_node = wait_for(lambda: node_of(pods_in(api, "train")["job"]), timeout_s=180,
                                what="the waiting job bound on the reclaimed GPUs")  # fmt: skip
            assert job_node == node
            gone = wait_for(
                lambda: [e for e in _events(api, "notebooks", "borrowed")
                         if e["reason"] == "IdleReclaimed"] or None,
                what="the IdleReclaimed Event",
            )  # fmt: skip
            message = gone[0]["message"]
            assert "reclaimed for train/job" in message and "reclaimAfterSeconds (180s)" in message
            assert "queue notebooks was borrowing h100-full" in message, message
            # warned before it was reclaimed, and reclaimed no sooner than its window
            since = datetime.fromisoformat(marks["borrowed"])
            at = datetime.fromisoformat(gone[0].get("eventTime") or gone[0]["firstTimestamp"])
            warned_at = datetime.fromisoformat(
                borrowed.get("eventTime") or borrowed["firstTimestamp"]
            )
            assert warned_at <= at and (at - since).total_seconds() >= 179
            left = pods_in(api, "notebooks")
            assert "borrowed" not in left or left["borrowed"]["metadata"].get("deletionTimestamp")
            assert node_of(left["within"]) == node  # within quota: still running
            assert not [e for e in _events(api, "notebooks", "within")
                        if e["reason"] == "IdleReclaimed"]  # fmt: skip
        finally:
            feed.stop()
            exporter.stop()
