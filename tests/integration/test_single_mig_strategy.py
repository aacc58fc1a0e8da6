"""The single MIG strategy on the real API server: nodes that publish their MIG instances as
`nvidia.com/gpu` (as the device plugin does with `migStrategy: single`) are the pool's, not a
mismatch, and a pod asking `nvidia.com/gpu: 1` gets an instance, where `gpucarve plan` puts it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gpucarve.config.policy_build import load_policy
from gpucarve.devcluster.stack import ADMIN_USER, LocalStack, find_binaries
from gpucarve.kube.api.client import Client
from gpucarve.kube.scheduler.loop import Scheduler, SchedulerConfig
from tests.integration.api import Api, wait_for
from tests.integration.kube_pods import create_pod, node_of, planned, pod, pods_in
from tests.integration.stack_setup import populate, running
from tests.unit.kube.view.test_single_mig import doc

pytestmark = pytest.mark.integration


def test_a_gpu_request_binds_to_an_instance_of_a_single_strategy_pool(tmp_path: Path) -> None:
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(yaml.safe_dump(doc()))
    with LocalStack(find_binaries(), tmp_path / "stack", policy_file) as stack:
        api = Api(stack.server, stack.tokens[ADMIN_USER])
        populate(stack, api, policy_file, ["serving"])
        sched = Scheduler(
            Client.from_kubeconfig(stack.kubeconfig()),
            load_policy(policy_file, []).policy,
            SchedulerConfig(interval_s=0.5, check_invariants=True),
        )
        with running(sched):
            for i in range(2):
                create_pod(api, pod("serving", f"s{i}", "nvidia.com/gpu", 1))
            wait_for(
                lambda: all(node_of(p) for p in pods_in(api, "serving").values()), what="bound"
            )
            assert sched.node_problems == set()
            bound = {
                n: json.loads(p["metadata"]["annotations"]["gpucarve.io/assignment"])["slices"]
                for n, p in pods_in(api, "serving").items()
            }
    assert planned(policy_file, "serving", ["s0", "s1"], "nvidia.com/gpu") == bound
    assert all("/1g.10gb@" in s[0] for s in bound.values())
