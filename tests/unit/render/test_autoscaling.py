"""`gpucarve render autoscaling` and the policy's `autoscaling:` entries: the HPA follows the
entry, the adapter serves one rule per metric, bad entries and options are refused with the
field and the fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpucarve.cli.main import app
from gpucarve.config.policy_build import load_policy
from gpucarve.core.problems import InvalidInput
from gpucarve.render.autoscaling import adapter_rules, hpa
from tests.paths import BUILTIN


def _policy(tmp_path: Path, entries: list[dict[str, Any]]) -> Path:
    doc = yaml.safe_load((BUILTIN / "three-teams.yaml").read_text())
    doc["autoscaling"] = entries
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


CHAT = {"deployment": "chat", "namespace": "serving", "maxReplicas": 6,
        "resources": {"nvidia.com/mig-3g.40gb": 1},
        "priorityClass": "production-critical"}  # fmt: skip


def test_the_hpa_follows_the_entry(tmp_path: Path) -> None:
    entry = {**CHAT, "minReplicas": 2, "requestLatencyMs": 250,
             "scaleDownStabilizationSeconds": 600}  # fmt: skip
    (a,) = load_policy(_policy(tmp_path, [entry])).policy.autoscaling
    assert (a.queue, a.priority_class) == ("production", "production-critical")
    h = hpa(a)
    spec = h["spec"]
    assert h["metadata"] == {"name": "chat", "namespace": "serving", "labels": {
        "app.kubernetes.io/managed-by": "gpucarve", "gpucarve.io/queue": "production"}}  # fmt: skip
    assert (spec["minReplicas"], spec["maxReplicas"]) == (2, 6)
    targets = {m["pods"]["metric"]["name"]: m["pods"]["target"]["averageValue"]
               for m in spec["metrics"]}  # fmt: skip
    assert targets == {"gpu_utilization": "70", "request_latency_ms": "250"}
    assert spec["behavior"]["scaleUp"]["stabilizationWindowSeconds"] == 60
    assert spec["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 600
    # without a latency target: GPU utilisation alone, and no latency rule for the adapter
    (b,) = load_policy(_policy(tmp_path, [CHAT])).policy.autoscaling
    assert [m["pods"]["metric"]["name"] for m in hpa(b)["spec"]["metrics"]] == ["gpu_utilization"]
    only_gpu = load_policy(_policy(tmp_path, [CHAT])).policy
    assert [r["name"]["as"] for r in adapter_rules(only_gpu)] == ["gpu_utilization"]


def test_the_adapter_has_one_rule_per_latency_metric_and_the_exported_labels(
    tmp_path: Path,
) -> None:
    entries = [{**CHAT, "requestLatencyMs": 250},
               {**CHAT, "deployment": "embed", "requestLatencyMs": 80},
               {**CHAT, "deployment": "rank", "requestLatencyMs": 90,
                "latencyMetric": "rank_latency_ms", "latencyQuantile": 0.99}]  # fmt: skip
    policy = load_policy(_policy(tmp_path, entries)).policy
    rules = adapter_rules(policy, exported=True)
    assert [r["name"]["as"] for r in rules] == ["gpu_utilization", "rank_latency_ms",
                                                "request_latency_ms"]  # fmt: skip
    assert "histogram_quantile(0.99," in rules[1]["metricsQuery"]
    assert all(set(r["resources"]["overrides"]) == {"exported_namespace", "exported_pod"}
               for r in rules)  # fmt: skip
    assert "on (exported_namespace, exported_pod)" in rules[0]["metricsQuery"]


@pytest.mark.parametrize(
    ("change", "code", "field"),
    [
        ({"minReplicas": 9}, "min-above-max", "autoscaling[0].minReplicas"),
        ({"namespace": "research"}, "priority-class-not-allowed", "autoscaling[0].priorityClass"),
        ({"resources": {"nvidia.com/mig-9g.1gb": 1}}, "no-flavor-serves",
         "autoscaling[0].resources"),
        ({"namespace": "nowhere"}, "no-queue", "autoscaling[0].namespace"),
        ({"queue": "research"}, "queue-not-for-namespace", "autoscaling[0].queue"),
    ],
)  # fmt: skip
def test_bad_entries_name_their_field(
    tmp_path: Path, change: dict[str, Any], code: str, field: str
) -> None:
    with pytest.raises(InvalidInput) as err:
        load_policy(_policy(tmp_path, [{**CHAT, **change}]))
    assert [(p.code, p.location) for p in err.value.problems] == [(code, field)]
    assert all(p.fix for p in err.value.problems)


def test_two_quantiles_of_one_histogram_and_a_second_entry_are_refused(tmp_path: Path) -> None:
    entries = [{**CHAT, "requestLatencyMs": 250},
               {**CHAT, "deployment": "b", "requestLatencyMs": 250, "latencyQuantile": 0.9},
               {**CHAT}]  # fmt: skip
    with pytest.raises(InvalidInput) as err:
        load_policy(_policy(tmp_path, entries))
    codes = [(p.code, p.location) for p in err.value.problems]
    assert codes == [("quantile-conflict", "autoscaling[1].latencyQuantile"),
                     ("duplicate-autoscaling", "autoscaling[2].deployment")]  # fmt: skip


def test_the_command_refuses_a_policy_without_entries_and_bad_labels(tmp_path: Path) -> None:
    runner = CliRunner()
    none = runner.invoke(
        app, ["render", "autoscaling", "--policy", str(BUILTIN / "three-teams.yaml")]
    )
    assert none.exit_code == 2 and "no autoscaling entries" in none.output
    path = _policy(tmp_path, [CHAT])
    bad = runner.invoke(app, ["render", "autoscaling", "--policy", str(path), "--labels", "x"])
    assert bad.exit_code == 2 and "use 'pod' or 'exported'" in bad.output
    ok = runner.invoke(app, ["render", "autoscaling", "--policy", str(path)])
    assert ok.exit_code == 0, ok.output
    kinds = [d["kind"] for d in yaml.safe_load_all(ok.output) if d]
    assert kinds == ["HorizontalPodAutoscaler", "ConfigMap"]
    values = runner.invoke(
        app, ["render", "autoscaling", "--policy", str(path), "--adapter-values"]
    )
    assert yaml.safe_load(values.output)["rules"]["custom"][0]["name"]["as"] == "gpu_utilization"
