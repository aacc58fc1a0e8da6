"""Autoscaling rendered from the policy, checked by the real tools: the HPAs and the
prometheus-adapter ConfigMap are accepted by the real API server (server-side dry run, strict
fields); the adapter's queries, expanded as the adapter expands them for a request, are valid
PromQL for promtool and give the expected values on sample series (MIG engine activity
preferred to whole-GPU utilisation per pod; the latency histogram's quantile). And scale-up
finds capacity: a Deployment scaled through its scale subresource, as the HPA controller does,
gets its new replicas placed in its queue at its priority, preempting lower-priority work of
that queue (kube-controller-manager makes the pods)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucarve.config.policy_build import load_policy
from gpucarve.devcluster.stack import ADMIN_USER, LocalStack, find_binaries
from gpucarve.render.autoscaling import adapter_config_map, adapter_rules, expand, hpa
from tests.integration.api import Api, wait_for
from tests.integration.chart import apply, ensure_namespace
from tests.integration.kube_pods import create_pod, node_of, pod, pods_in
from tests.integration.stack_setup import example_policy, populate, scheduling

pytestmark = pytest.mark.integration
MIG = "nvidia.com/mig-3g.40gb"


def _policy_file(folder: Path) -> Path:
    path = example_policy(folder)
    doc = yaml.safe_load(path.read_text())
    doc["autoscaling"] = [{
        "deployment": "chat", "namespace": "serving", "minReplicas": 2, "maxReplicas": 6,
        "resources": {MIG: 1}, "priorityClass": "production-critical", "requestLatencyMs": 250,
    }]  # fmt: skip
    path.write_text(yaml.safe_dump(doc))
    return path


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(find_binaries() / "promtool"), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)  # fmt: skip


def test_the_adapter_queries_are_promql_and_give_the_pods_figures(tmp_path: Path) -> None:
    policy = load_policy(_policy_file(tmp_path)).policy
    gpu_rule, latency_rule = adapter_rules(policy)
    matchers = 'namespace="serving",pod=~"chat-a|chat-b"'
    gpu = expand(gpu_rule["metricsQuery"], "DCGM_FI_DEV_GPU_UTIL", matchers, "pod")
    latency = expand(latency_rule["metricsQuery"], "request_latency_ms_bucket", matchers, "pod")
    rules = {"groups": [{"name": "adapter", "rules": [
        {"record": "adapter:gpu_utilization", "expr": gpu},
        {"record": "adapter:request_latency_ms", "expr": latency}]}]}  # fmt: skip
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules))
    checked = promtool("check", "rules", "rules.yaml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    a = 'namespace="serving",pod="chat-a"'
    b = 'namespace="serving",pod="chat-b"'
    series = {
        # chat-a on a MIG instance: engine activity 0.8; the GPU's whole figure (30) is not its own
        f'DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{a},gpu="0",GPU_I_ID="1"}}': "0.8x20",
        f'DCGM_FI_DEV_GPU_UTIL{{{a},gpu="0"}}': "30x20",
        # chat-b on two whole GPUs without profiling metrics: their average
        f'DCGM_FI_DEV_GPU_UTIL{{{b},gpu="1"}}': "50x20",
        f'DCGM_FI_DEV_GPU_UTIL{{{b},gpu="2"}}': "60x20",
        # another namespace's pod is not asked for
        'DCGM_FI_DEV_GPU_UTIL{namespace="research",pod="chat-a",gpu="3"}': "99x20",
        # chat-a's latency: per minute 60 requests ≤ 100 ms, 90 ≤ 250, 100 ≤ 500 and in all
        f'request_latency_ms_bucket{{{a},le="100"}}': "0+60x20",
        f'request_latency_ms_bucket{{{a},le="250"}}': "0+90x20",
        f'request_latency_ms_bucket{{{a},le="500"}}': "0+100x20",
        f'request_latency_ms_bucket{{{a},le="+Inf"}}': "0+100x20",
    }
    tests = {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [{"series": k, "values": v} for k, v in series.items()],
        "promql_expr_test": [
            {"expr": "adapter:gpu_utilization", "eval_time": "10m", "exp_samples": [
                {"labels": 'adapter:gpu_utilization{pod="chat-a"}', "value": 80},
                {"labels": 'adapter:gpu_utilization{pod="chat-b"}', "value": 55}]},
            # the 95th request falls half way into the 250-500 ms bucket
            # (rounded to the millisecond: rates carry float error)
            {"expr": "round(adapter:request_latency_ms)", "eval_time": "10m", "exp_samples": [
                {"labels": '{pod="chat-a"}', "value": 375}]},
        ]}]}  # fmt: skip
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests))
    ran = promtool("test", "rules", "tests.yaml", cwd=tmp_path)
    assert ran.returncode == 0, ran.stdout + ran.stderr


def _deployment(replicas: int) -> dict[str, Any]:
    template = pod("serving", "x", MIG, priority_class="production-critical")
    template["metadata"] = {"labels": {"app": "chat"}}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "chat", "namespace": "serving"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "chat"}},
                 "template": template},
    }  # fmt: skip


def test_hpas_apply_and_a_scale_up_preempts_to_find_capacity(tmp_path: Path) -> None:
    policy_file = _policy_file(tmp_path)
    policy = load_policy(policy_file).policy
    with LocalStack(find_binaries(), tmp_path / "stack", policy_file) as stack:
        api = Api(stack.server, stack.tokens[ADMIN_USER])
        populate(stack, api, policy_file, ["production", "serving"])
        ensure_namespace(api, "monitoring")
        for obj in [hpa(a) for a in policy.autoscaling] + [
            adapter_config_map(policy, "monitoring", "prometheus-adapter")
        ]:
            status, body = apply(api, obj, dry_run=True)
            assert status in (200, 201), (obj["kind"], body)
        with scheduling(stack, policy_file):
            # the production queue's 3g.40gb quota (12 nominal + 4 borrowed) full of batch work
            for i in range(16):
                create_pod(api, pod("production", f"batch-{i}", MIG, priority_class="training"))
            wait_for(lambda: sum(1 for p in pods_in(api, "production").values() if node_of(p))
                     == 16, what="batch bound")  # fmt: skip
            status, body = api.call("POST", "/apis/apps/v1/namespaces/serving/deployments",
                                    _deployment(2))  # fmt: skip
            assert status == 201, body

            def serving_bound() -> int:
                return sum(1 for p in pods_in(api, "serving").values() if node_of(p))

            wait_for(lambda: serving_bound() == 2, timeout_s=60, what="two replicas")
            # what the HPA controller does when the metrics ask for more
            scale = {"spec": {"replicas": 4}}
            path = "/apis/apps/v1/namespaces/serving/deployments/chat/scale"
            status, body = api.call("PATCH", path, scale, "application/merge-patch+json")
            assert status == 200, body
            wait_for(lambda: serving_bound() == 4, timeout_s=60, what="four replicas")
        left = sum(1 for p in pods_in(api, "production").values() if node_of(p))
        assert left == 12, left  # four batch pods gave way, no more
        events = api.get("/api/v1/namespaces/production/events")["items"]
        assert sum(1 for e in events if e["reason"] == "Preempted") >= 4
