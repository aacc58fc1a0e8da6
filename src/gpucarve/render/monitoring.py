"""Monitoring rendered from the policy: a PrometheusRule (the Prometheus Operator's
`monitoring.coreos.com/v1`) with the seeds' three DCGM alerts and gpucarve's own, and a Grafana
dashboard built with Grafana's foundation SDK (so its JSON is the SDK's, not hand-written).

DCGM series are the exporter's defaults: `DCGM_FI_DEV_GPU_UTIL` (%), `DCGM_FI_DEV_FB_USED` and
`DCGM_FI_DEV_FB_FREE` (MiB), `DCGM_FI_DEV_GPU_TEMP` (°C); the pod's `namespace` label (with the
exporter's Kubernetes mapping on) joins them to the policy's teams. Thresholds and `for:`
durations come from the policy's `monitoring:` block.
"""

from __future__ import annotations

import json
from typing import Any

from grafana_foundation_sdk.builders import dashboard, prometheus, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import GridPos

from gpucarve.core.policy import Policy

DASHBOARD_UID = "gpucarve-overview"


def _duration(seconds: int) -> str:
    return f"{seconds // 3600}h" if seconds % 3600 == 0 else f"{seconds // 60}m"


def _team_namespaces(policy: Policy) -> str:
    """The namespaces the policy's queues serve, as one regex: the DCGM panels show the teams'
    pods, grouped by namespace (a queue's namespaces are its team's)."""
    return "|".join(ns for q in policy.queues for ns in q.namespaces)


def alert_rules(policy: Policy) -> list[dict[str, Any]]:
    m = policy.monitoring
    mem = "DCGM_FI_DEV_FB_USED / (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE) * 100"
    dcgm = [
        {
            "alert": "GPUUtilizationLow",
            "expr": f"DCGM_FI_DEV_GPU_UTIL < {m.util_low_percent}",
            "for": _duration(m.util_low_s),
            "labels": {"severity": "info"},
            "annotations": {
                "summary": "GPU {{ $labels.gpu }} on {{ $labels.Hostname }}{{ $labels.hostname }}"
                f" below {m.util_low_percent} % for {_duration(m.util_low_s)}",
                "description": "Allocated GPUs that idle cost money: right-size the request, "
                "share the GPU (MIG, time-slicing) or release it.",
            },
        },
        {
            "alert": "GPUMemoryHigh",
            "expr": f"{mem} > {m.memory_high_percent}",
            "for": _duration(m.memory_high_s),
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "GPU {{ $labels.gpu }} memory above "
                f"{m.memory_high_percent} % for {_duration(m.memory_high_s)}",
                "description": "The next allocation may fail with out-of-memory.",
            },
        },
        {
            "alert": "GPUTemperatureHigh",
            "expr": f"DCGM_FI_DEV_GPU_TEMP > {m.temperature_high_c}",
            "for": _duration(m.temperature_high_s),
            "labels": {"severity": "critical"},
            "annotations": {
                "summary": "GPU {{ $labels.gpu }} above "
                f"{m.temperature_high_c} °C for {_duration(m.temperature_high_s)}",
                "description": "Thermal throttling slows the job; check cooling and the node.",
            },
        },
    ]
    window = _duration(m.queue_starved_s)
    own = [
        {
            "alert": "GpucarveQueueStarved",
            "expr": (
                'sum by (queue) (gpucarve_pending_workloads{reason!="validation"}) > 0 '
                "unless on (queue) "
                f"sum by (queue) (increase(gpucarve_admission_wait_seconds_count[{window}])) > 0"
            ),
            "for": window,
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "Queue {{ $labels.queue }} has had work waiting and nothing admitted "
                f"for {window}",
                "description": "Run `gpucarve explain NAMESPACE/POD` on one of its pods.",
            },
        },
        {
            "alert": "GpucarveGangStuck",
            "expr": 'sum by (queue) (gpucarve_pending_workloads{reason="gang"}) > 0',
            "for": _duration(m.gang_stuck_s),
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "A gang of queue {{ $labels.queue }} has waited short of its pods "
                f"for {_duration(m.gang_stuck_s)}",
                "description": "Its PodGroup's status says which pods are missing.",
            },
        },
        {
            "alert": "GpucarveRepartitionsFailing",
            "expr": (
                'sum by (pool) (increase(gpucarve_repartitions_total{result="failed"}[30m])) > 0'
            ),
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "MIG repartitions of pool {{ $labels.pool }} failed in the last 30 min",
                "description": "The node's MIGReconfigureFailed Event says why.",
            },
        },
        {
            # a pool's budget for GPUs out of service spent: faults are left in service
            "alert": "GpucarveGpuFaultsPastBudget",
            "expr": "sum by (pool) (gpucarve_gpu_faults_past_budget) > 0",
            "for": "10m",
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "Faulty GPUs of pool {{ $labels.pool }} are left in service: its "
                "gpuHealth.maxOutOfService is spent",
                "description": "A fleet-wide event or a bad driver? The nodes' "
                "GPUFaultPastBudget Events name the GPUs and their faults.",
            },
        },
        {
            # remediation is not bringing a pool's GPUs back
            "alert": "GpucarveGpusOutOfServiceLong",
            "expr": "sum by (pool) (gpucarve_gpus_out_of_service) > 0",
            "for": "4h",
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "Pool {{ $labels.pool }} has had GPUs out of service for 4 h",
                "description": "Classes that need a person (remap-failed, memory-worn, "
                "flapping) or a reboot nobody did: the nodes' GPUOutOfService Events say which.",
            },
        },
        {
            "alert": "GpucarveNoLeader",
            "expr": "(max(gpucarve_leader) or vector(0)) < 1",
            "for": "2m",
            "labels": {"severity": "critical"},
            "annotations": {
                "summary": "No gpucarve scheduler leads: GPU pods are not being scheduled",
                "description": "Check the scheduler's pods and its Lease.",
            },
        },
        {
            # at least one GPU free on average, for an hour, while work that could use it
            # waits: the idle accounting names why (engine/idle.py)
            "alert": "GpucarveGpusIdleWhileWorkWaits",
            "expr": (
                "sum by (pool, cause) "
                '(rate(gpucarve_idle_gpu_seconds_total{cause!="nothing-waiting"}[15m])) >= 1'
            ),
            "for": "1h",
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "Pool {{ $labels.pool }} has kept GPUs free for an hour while work "
                "waited ({{ $labels.cause }})",
                "description": "`gpucarve explain` on a waiting pod says why; `gpucarve simulate "
                "--recommend` on the policy says what would use them.",
            },
        },
    ]
    return [{"name": "gpucarve-dcgm", "rules": dcgm}, {"name": "gpucarve", "rules": own}]


def prometheus_rule(policy: Policy, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "gpucarve",
            "namespace": namespace,
            "labels": {"app.kubernetes.io/part-of": "gpucarve"},
        },
        "spec": {"groups": alert_rules(policy)},
    }


def dashboard_queries(policy: Policy) -> dict[str, str]:
    """Each panel's title and PromQL (what promtool checks)."""
    teams = _team_namespaces(policy) or ".+"
    return {
        "Usage against nominal quota per team": (
            "sum by (queue) (gpucarve_queue_usage_slices) "
            "/ on (queue) sum by (queue) (gpucarve_queue_nominal_slices)"
        ),
        "Borrowed slices per team": "sum by (queue) (gpucarve_queue_borrowed_slices)",
        "Pending workloads by reason": "sum by (reason) (gpucarve_pending_workloads)",
        "GPUs free while work waits, by cause": (
            'sum by (cause) (rate(gpucarve_idle_gpu_seconds_total{cause!="nothing-waiting"}[5m]))'
        ),
        "Workload completion time p90 per team": (
            "histogram_quantile(0.9, sum by (queue, le) "
            "(rate(gpucarve_completion_seconds_bucket[1h])))"
        ),
        "Admission wait p90 per team": (
            "histogram_quantile(0.9, sum by (queue, le) "
            "(rate(gpucarve_admission_wait_seconds_bucket[1h])))"
        ),
        "GPU utilisation per team (DCGM)": (
            f'avg by (namespace) (DCGM_FI_DEV_GPU_UTIL{{namespace=~"{teams}"}})'
        ),
        "GPU memory used per team (DCGM)": (
            f'sum by (namespace) (DCGM_FI_DEV_FB_USED{{namespace=~"{teams}"}})'
        ),
        "GPU temperature (DCGM)": "max by (Hostname, hostname, gpu) (DCGM_FI_DEV_GPU_TEMP)",
        "Thermal throttling (DCGM)": (
            "sum by (Hostname, hostname) (rate(DCGM_FI_DEV_THERMAL_VIOLATION[5m]))"
        ),
        "Workloads holding GPUs idle, by team and stage": (
            "sum by (queue, stage) (gpucarve_workloads_held_idle)"
        ),
        "Idle work reclaimed per team": (
            'sum by (queue) (increase(gpucarve_evictions_total{cause="idle"}[1h]))'
        ),
        "Free and fragmented slices per pool": (
            'sum by (pool) (gpucarve_pool_slices{state="free"}) - '
            "sum by (pool) (gpucarve_pool_fragmented_slices)"
        ),
        "Cycle duration p99": (
            "histogram_quantile(0.99, sum by (le) "
            "(rate(gpucarve_cycle_duration_seconds_bucket[5m])))"
        ),
    }


def grafana_dashboard(policy: Policy) -> dict[str, Any]:
    units = {
        "Usage against nominal quota per team": "percentunit",
        "GPU memory used per team (DCGM)": "decmbytes",
        "GPU temperature (DCGM)": "celsius",
        "Admission wait p90 per team": "s",
        "Workload completion time p90 per team": "s",
        "Cycle duration p99": "s",
        "GPU utilisation per team (DCGM)": "percent",
    }
    board = (
        dashboard.Dashboard(f"gpucarve: {policy.name}")
        .uid(DASHBOARD_UID)
        .tags(["gpucarve", "gpu"])
        .refresh("30s")
        .time("now-6h", "now")
    )
    for i, (title, expr) in enumerate(dashboard_queries(policy).items()):
        panel = (
            timeseries.Panel()
            .title(title)
            .unit(units.get(title, "short"))
            .grid_pos(GridPos(h=8, w=12, x=12 * (i % 2), y=8 * (i // 2)))
            .with_target(prometheus.Dataquery().expr(expr).legend_format("__auto"))
        )
        board = board.with_panel(panel)
    built = board.build()
    return dict(json.loads(json.dumps(built, cls=JSONEncoder)))
