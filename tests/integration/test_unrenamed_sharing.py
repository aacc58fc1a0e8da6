"""Time-slicing as the NVIDIA device plugin publishes it by default (`renameByDefault: false`)
on the real API server: nodes that advertise their replicas as `nvidia.com/gpu` are the pool's,
not a mismatch, and pods written for them (`nvidia.com/gpu: 1`) get replicas, where
`gpucarve plan` puts them; a whole-GPU pod in the same namespace's queue still gets an H100."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucarve.config.policy_build import load_policy
from gpucarve.devcluster.stack import ADMIN_USER, LocalStack, find_binaries
from gpucarve.kube.api.client import Client
from gpucarve.kube.scheduler.loop import Scheduler, SchedulerConfig
from tests.integration.api import Api, wait_for
from tests.integration.kube_pods import create_pod, node_of, planned, pod, pods_in
from tests.integration.stack_setup import populate, running

pytestmark = pytest.mark.integration


def _doc(sharing: str) -> dict[str, Any]:
    model, prefix = ("L40S", "l40s") if sharing == "time-slicing" else ("T4", "t4")
    return {
        "apiVersion": "gpucarve.io/v1alpha1",
        "kind": "Policy",
        "metadata": {"name": "unrenamed"},
        "pools": [
            {"name": "dev", "gpuModel": model, "nodes": 2, "gpusPerNode": 1,
             "sharing": sharing, "replicas": 4, "renameByDefault": False,
             "nodeLabels": {"gpucarve.io/pool": "dev"}},
            # whole GPUs beside them publish nvidia.com/gpu too: the shared pool is the queue's
            {"name": "train", "gpuModel": "H100-SXM5-80GB", "nodes": 1, "gpusPerNode": 8,
             "sharing": "exclusive", "nodeLabels": {"gpucarve.io/pool": "train"}},
        ],
        "queues": [{"name": "web", "namespaces": ["web"], "quota": {prefix: {"nominal": 2}}},
                   {"name": "ml", "namespaces": ["ml"], "quota": {"h100-full": {"nominal": 8}}}],
    }  # fmt: skip


@pytest.mark.parametrize("sharing", ["time-slicing", "mps"])
def test_pods_asking_nvidia_com_gpu_get_replicas_of_an_unrenamed_pool(
    tmp_path: Path, sharing: str
) -> None:
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(yaml.safe_dump(_doc(sharing)))
    with LocalStack(find_binaries(), tmp_path / "stack", policy_file) as stack:
        api = Api(stack.server, stack.tokens[ADMIN_USER])
        populate(stack, api, policy_file, ["web"])
        node = api.get("/api/v1/nodes/dev-0")
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "4"
        assert "nvidia.com/gpu.shared" not in node["status"]["allocatable"]
        sched = Scheduler(
            Client.from_kubeconfig(stack.kubeconfig()),
            load_policy(policy_file, []).policy,
            SchedulerConfig(interval_s=0.5, check_invariants=True),
        )
        with running(sched):
            # eight pods of a Deployment written for the device plugin's defaults
            for i in range(8):
                create_pod(api, pod("web", f"web-{i}", "nvidia.com/gpu", 1))
            wait_for(lambda: all(node_of(p) for p in pods_in(api, "web").values()), what="bound")
            assert sched.node_problems == set()
            bound = {
                n: json.loads(p["metadata"]["annotations"]["gpucarve.io/assignment"])["slices"]
                for n, p in pods_in(api, "web").items()
            }
            # a ninth exceeds the queue's two GPUs (eight replicas): it waits, with the reason
            create_pod(api, pod("web", "web-8", "nvidia.com/gpu", 1))
            reason = wait_for(
                lambda: next(
                    (c for c in (pods_in(api, "web")["web-8"].get("status") or {}).get(
                        "conditions") or [] if c.get("type") == "PodScheduled"), None),
                what="the ninth pod's reason",
            )  # fmt: skip
            assert reason["status"] == "False" and " GPUs, needs 0.25 more" in reason["message"]
    assert sorted({s[0].split("/")[0] for s in bound.values()}) == ["dev-0", "dev-1"]
    names = [f"web-{i}" for i in range(8)]
    assert planned(policy_file, "web", names, "nvidia.com/gpu") == bound
