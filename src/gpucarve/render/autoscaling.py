"""Autoscaling rendered from the policy's `autoscaling:` entries (seed 2's HPA): per inference
Deployment a HorizontalPodAutoscaler (`autoscaling/v2`) on two pods metrics, `gpu_utilization`
and the latency histogram's quantile, and the prometheus-adapter rules that make those
metrics exist for the HPA (the custom metrics API).

GPU utilisation per pod comes from DCGM: `DCGM_FI_PROF_GR_ENGINE_ACTIVE` (a ratio, per GPU and
per MIG instance) where the exporter has it, else `DCGM_FI_DEV_GPU_UTIL` (percent, whole GPUs:
on a MIG instance it is not attributed), averaged over the pod's GPUs. The exporter's
Kubernetes mapping puts `namespace` and `pod` on its series; a Prometheus that scrapes it
without `honorLabels` renames them `exported_namespace`/`exported_pod` (`--labels exported`).
"""

from __future__ import annotations

from typing import Any

from gpucarve.core.policy import SCALE_DOWN_PODS, SCALE_UP_PODS, Autoscale, Policy
from gpucarve.core.vocabulary import MANAGED_BY_LABEL, QUEUE_LABEL
from gpucarve.render.nvidia import config_map
from gpucarve.render.yaml_out import dump

GPU_METRIC = "gpu_utilization"


def _target(name: str, value: int) -> dict[str, Any]:
    return {
        "type": "Pods",
        "pods": {
            "metric": {"name": name},
            "target": {"type": "AverageValue", "averageValue": str(value)},
        },
    }


def hpa(a: Autoscale) -> dict[str, Any]:
    metrics = [_target(GPU_METRIC, a.gpu_util_percent)]
    if a.latency_ms is not None:
        metrics.append(_target(a.latency_metric, a.latency_ms))
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {
            "name": a.deployment,
            "namespace": a.namespace,
            "labels": {MANAGED_BY_LABEL: "gpucarve", QUEUE_LABEL: a.queue},
        },
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": a.deployment},
            "minReplicas": a.min_replicas,
            "maxReplicas": a.max_replicas,
            "metrics": metrics,
            "behavior": {
                "scaleUp": {
                    "stabilizationWindowSeconds": a.up_window_s,
                    "selectPolicy": "Max",
                    "policies": [
                        {"type": "Pods", "value": SCALE_UP_PODS, "periodSeconds": 60},
                        {"type": "Percent", "value": 100, "periodSeconds": 60},
                    ],
                },
                "scaleDown": {
                    "stabilizationWindowSeconds": a.down_window_s,
                    "selectPolicy": "Min",
                    "policies": [{"type": "Pods", "value": SCALE_DOWN_PODS, "periodSeconds": 60}],
                },
            },
        },
    }


def _resources(namespace: str, pod: str) -> dict[str, Any]:
    return {"overrides": {namespace: {"resource": "namespace"}, pod: {"resource": "pod"}}}


def adapter_rules(policy: Policy, exported: bool = False) -> list[dict[str, Any]]:
    """prometheus-adapter `rules` (its config.yaml, or the Helm chart's `rules.custom`)."""
    ns, pod = ("exported_namespace", "exported_pod") if exported else ("namespace", "pod")
    has = f'{ns}!="",{pod}!=""'
    rules: list[dict[str, Any]] = [
        {
            "seriesQuery": f"DCGM_FI_DEV_GPU_UTIL{{{has}}}",
            "resources": _resources(ns, pod),
            "name": {"matches": "^DCGM_FI_DEV_GPU_UTIL$", "as": GPU_METRIC},
            # a pod with engine-activity series uses only those (its MIG instances); the
            # whole-GPU figure only for pods without them
            "metricsQuery": (
                "avg by (<<.GroupBy>>) ("
                "(DCGM_FI_PROF_GR_ENGINE_ACTIVE{<<.LabelMatchers>>} * 100)"
                f" or on ({ns}, {pod}) DCGM_FI_DEV_GPU_UTIL{{<<.LabelMatchers>>}})"
            ),
        }
    ]
    quantiles: dict[str, float] = {}
    for a in policy.autoscaling:
        if a.latency_ms is not None:
            quantiles.setdefault(a.latency_metric, a.latency_quantile)
    for metric, q in sorted(quantiles.items()):
        rules.append(
            {
                "seriesQuery": f"{metric}_bucket{{{has}}}",
                "resources": _resources(ns, pod),
                "name": {"matches": f"^{metric}_bucket$", "as": metric},
                "metricsQuery": (
                    f"histogram_quantile({q:g}, sum by (le, <<.GroupBy>>) "
                    "(rate(<<.Series>>{<<.LabelMatchers>>}[2m])))"
                ),
            }
        )
    return rules


def adapter_config_map(
    policy: Policy, namespace: str, name: str, exported: bool = False
) -> dict[str, Any]:
    text = dump({"rules": adapter_rules(policy, exported)})
    return config_map(name, namespace, {"config.yaml": text})


def expand(query: str, series: str, matchers: str, group_by: str) -> str:
    """A rule's metricsQuery as the adapter runs it for one request (for checking it)."""
    return (
        query.replace("<<.Series>>", series)
        .replace("<<.LabelMatchers>>", matchers)
        .replace("<<.GroupBy>>", group_by)
    )
