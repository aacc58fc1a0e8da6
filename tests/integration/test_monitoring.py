"""The monitoring gpucarve renders, checked by Prometheus' own promtool (built from the
Prometheus Go module into the test environment): the rules load, each alert fires on series
that cross its threshold for its duration and stays silent on series just below or not long
enough; every dashboard query is valid PromQL; the dashboard is what Grafana's SDK reads."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from grafana_foundation_sdk.models.dashboard import Dashboard

from gpucarve.config.policy_build import load_policy
from gpucarve.devcluster.stack import find_binaries
from gpucarve.render.monitoring import alert_rules, dashboard_queries, grafana_dashboard
from tests.paths import BUILTIN

pytestmark = pytest.mark.integration
POLICY = load_policy(BUILTIN / "three-teams.yaml").policy
RULES = {r["alert"]: r for g in alert_rules(POLICY) for r in g["rules"]}


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(find_binaries() / "promtool"), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _fires(alert: str, labels: dict[str, str]) -> dict[str, Any]:
    """The alert as promtool must see it fire: its rule's labels and its annotations with
    `{{ $labels.x }}` filled in (absent labels are empty, as Prometheus renders them)."""
    rule = RULES[alert]
    fill = lambda t: re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m[1], ""), t)  # noqa: E731
    return {
        "exp_labels": {**labels, **rule["labels"]},
        "exp_annotations": {k: fill(v) for k, v in rule["annotations"].items()},
    }


def _case(series: dict[str, str], eval_time: str, alert: str,
          firing: list[dict[str, str]]) -> dict[str, Any]:  # fmt: skip
    return {
        "interval": "1m",
        "input_series": [{"series": s, "values": v} for s, v in series.items()],
        "alert_rule_test": [
            {
                "eval_time": eval_time,
                "alertname": alert,
                "exp_alerts": [_fires(alert, labels) for labels in firing],
            }
        ],
    }


CASES = [
    # 86 °C crosses 85 for 10 min; 85 °C is not above it
    _case({'DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="n1"}': "86x15",
           'DCGM_FI_DEV_GPU_TEMP{gpu="1",Hostname="n1"}': "85x15"},
          "10m", "GPUTemperatureHigh", [{"gpu": "0", "Hostname": "n1"}]),
    # 86 °C for 4 min only: below the 5 min the policy asks
    _case({'DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="n1"}': "86x3 60x10"},
          "4m", "GPUTemperatureHigh", []),
    # 91 % of the framebuffer used; exactly 90 % stays silent
    _case({'DCGM_FI_DEV_FB_USED{gpu="0"}': "910x15", 'DCGM_FI_DEV_FB_FREE{gpu="0"}': "90x15",
           'DCGM_FI_DEV_FB_USED{gpu="1"}': "900x15", 'DCGM_FI_DEV_FB_FREE{gpu="1"}': "100x15"},
          "10m", "GPUMemoryHigh", [{"gpu": "0"}]),
    # 29 % for an hour and more; 30 % is not below 30
    _case({'DCGM_FI_DEV_GPU_UTIL{gpu="0"}': "29x90", 'DCGM_FI_DEV_GPU_UTIL{gpu="1"}': "30x90"},
          "70m", "GPUUtilizationLow", [{"gpu": "0"}]),
    _case({'DCGM_FI_DEV_GPU_UTIL{gpu="0"}': "29x90"}, "50m", "GPUUtilizationLow", []),
    # queue a waits an hour with nothing admitted; queue b waits but admits all along
    _case({'gpucarve_pending_workloads{queue="a",reason="quota"}': "1x90",
           'gpucarve_admission_wait_seconds_count{queue="a"}': "0x90",
           'gpucarve_pending_workloads{queue="b",reason="quota"}': "1x90",
           'gpucarve_admission_wait_seconds_count{queue="b"}': "0+1x90"},
          "75m", "GpucarveQueueStarved", [{"queue": "a"}]),
    # a gang short of its pods for 20 min fires; one short for 10 min does not
    _case({'gpucarve_pending_workloads{queue="a",reason="gang"}': "1x30",
           'gpucarve_pending_workloads{queue="b",reason="gang"}': "1x10 0x20"},
          "20m", "GpucarveGangStuck", [{"queue": "a"}]),
    _case({'gpucarve_repartitions_total{pool="p",result="failed"}': "0x5 1x10",
           'gpucarve_repartitions_total{pool="q",result="succeeded"}': "0x5 1x10"},
          "10m", "GpucarveRepartitionsFailing", [{"pool": "p"}]),
    # pool p's faulty GPUs left in service for 15 min fire; q's for 5 min do not
    _case({'gpucarve_gpu_faults_past_budget{pool="p"}': "2x20",
           'gpucarve_gpu_faults_past_budget{pool="q"}': "1x5 0x15"},
          "15m", "GpucarveGpuFaultsPastBudget", [{"pool": "p"}]),
    # a GPU out of service for five hours fires; one back within three hours does not
    _case({'gpucarve_gpus_out_of_service{pool="p"}': "1x300",
           'gpucarve_gpus_out_of_service{pool="q"}': "1x180 0x120"},
          "5h", "GpucarveGpusOutOfServiceLong", [{"pool": "p"}]),
    _case({"gpucarve_leader": "0x10"}, "5m", "GpucarveNoLeader", [{}]),
    _case({"gpucarve_leader": "1x10"}, "5m", "GpucarveNoLeader", []),
    # two GPUs free for an hour while work waits for another MIG profile fires; half a GPU,
    # and free GPUs nothing waits for, do not
    _case({'gpucarve_idle_gpu_seconds_total{pool="p",cause="mig-layout"}': "0+120x90",
           'gpucarve_idle_gpu_seconds_total{pool="q",cause="nominal-quota"}': "0+30x90",
           'gpucarve_idle_gpu_seconds_total{pool="p",cause="nothing-waiting"}': "0+600x90"},
          "80m", "GpucarveGpusIdleWhileWorkWaits", [{"pool": "p", "cause": "mig-layout"}]),
    _case({'gpucarve_idle_gpu_seconds_total{pool="p",cause="mig-layout"}': "0+120x50"},
          "50m", "GpucarveGpusIdleWhileWorkWaits", []),
]  # fmt: skip


def test_the_rules_load_and_each_alert_fires_only_past_its_threshold(tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": alert_rules(POLICY)}))
    checked = promtool("check", "rules", "rules.yaml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(RULES)} rules found" in checked.stdout
    tests = {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": CASES}
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests, allow_unicode=True))
    ran = promtool("test", "rules", "tests.yaml", cwd=tmp_path)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert {c["alert_rule_test"][0]["alertname"] for c in CASES} == set(RULES)


def test_a_threshold_from_the_policy_moves_the_alert(tmp_path: Path) -> None:
    doc = yaml.safe_load((BUILTIN / "three-teams.yaml").read_text())
    doc["monitoring"] = {"gpuTemperatureHighCelsius": 80, "gpuTemperatureHighForSeconds": 120}
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(doc))
    rules = {r["alert"]: r for g in alert_rules(load_policy(tmp_path / "policy.yaml").policy)
             for r in g["rules"]}  # fmt: skip
    assert rules["GPUTemperatureHigh"]["expr"] == "DCGM_FI_DEV_GPU_TEMP > 80"
    assert rules["GPUTemperatureHigh"]["for"] == "2m"


def test_every_dashboard_query_is_promql_and_grafana_reads_the_dashboard(tmp_path: Path) -> None:
    queries = dashboard_queries(POLICY)
    recorded = [
        {"record": f"gpucarve:panel_{i}", "expr": q} for i, q in enumerate(queries.values())
    ]
    group = {"name": "dashboard", "rules": recorded}
    (tmp_path / "panels.yaml").write_text(yaml.safe_dump({"groups": [group]}))
    checked = promtool("check", "rules", "panels.yaml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    board = grafana_dashboard(POLICY)
    read = Dashboard.from_json(board)
    assert read.uid == "gpucarve-overview" and read.panels is not None
    titles = [p["title"] for p in board["panels"]]
    assert titles == list(queries) and len(read.panels) == len(queries)
    exprs = [p["targets"][0]["expr"] for p in board["panels"]]
    assert exprs == list(queries.values())
    # no two panels overlap on the grid
    cells = {(p["gridPos"]["x"], p["gridPos"]["y"]) for p in board["panels"]}
    assert len(cells) == len(titles)
