"""The GPU Operator's configuration, as a ClusterPolicy or as Helm values: its MIG strategy,
the ConfigMaps its device plugin and MIG manager read, inline device-plugin configurations, and
GPU Feature Discovery; anything else is named."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpucarve.config.gpu_operator_import import import_gpu_operator, report
from gpucarve.core.problems import InvalidInput


def test_a_cluster_policy_names_the_config_maps_to_import(tmp_path: Path) -> None:
    policy = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy",
              "metadata": {"name": "cluster-policy"},
              "spec": {"mig": {"strategy": "mixed"},
                       "devicePlugin": {"config": {"name": "ts", "default": "any"}},
                       "migManager": {"config": {"name": "custom-mig-config"}}}}  # fmt: skip
    path = tmp_path / "cp.yaml"
    path.write_text(yaml.safe_dump_all([policy, {"kind": "Namespace", "metadata": {}}]))
    cfg = import_gpu_operator(path)
    assert (cfg.mig_strategy, cfg.device_plugin_config_map, cfg.device_plugin_default) == (
        "mixed", "ts", "any")  # fmt: skip
    assert cfg.mig_manager_config_map == "custom-mig-config" and cfg.gfd
    lines = report(cfg)
    assert any("gpucarve import device-plugin" in line for line in lines)
    assert any("skipped Namespace" in line for line in lines)


def test_helm_values_with_inline_configurations_give_pool_blocks(tmp_path: Path) -> None:
    data = ("version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n"
            "    resources:\n    - {name: nvidia.com/gpu, replicas: 4}\n")  # fmt: skip
    plugin = {"config": {"create": True, "name": "pc", "data": {"t4": data}}}
    values = {"mig": {"strategy": "single"}, "gfd": {"enabled": False}, "devicePlugin": plugin}
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    cfg = import_gpu_operator(path)
    (block,) = [c.pool_block() for c in cfg.inline]
    assert block == {"name": "t4", "sharing": "time-slicing", "gpuModel": "T4", "replicas": 4}
    text = "\n".join(report(cfg))
    assert "mig: {strategy: single}" in text and "gfd.enabled false" in text


def test_anything_else_is_refused_with_what_it_held(tmp_path: Path) -> None:
    path = tmp_path / "x.yaml"
    path.write_text(yaml.safe_dump({"kind": "ConfigMap", "metadata": {"name": "x"}}))
    with pytest.raises(InvalidInput) as exc:
        import_gpu_operator(path)
    (p,) = exc.value.problems
    assert p.code == "not-gpu-operator" and "skipped ConfigMap" in p.message and p.fix
    assert "gpucarve import device-plugin" in p.message  # the other importer reads it


def test_a_mig_strategy_the_operator_does_not_know_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump({"mig": {"strategy": "sideways"},
                                    "devicePlugin": {"config": {"name": "x"}}}))  # fmt: skip
    with pytest.raises(InvalidInput) as exc:
        import_gpu_operator(path)
    (p,) = exc.value.problems
    assert p.code == "unknown-mig-strategy" and "sideways" in p.message
    assert p.fix == "use one of: single, mixed"


@pytest.mark.parametrize(
    ("plugin", "code", "field"),
    [
        # a default none of its configurations has: unlabelled nodes would get none
        ({"config": {"name": "pc", "default": "a100", "data": {
            "t4": "version: v1\n"}}}, "unknown-default", "default"),
        ({"config": {"name": ["pc", "other"]}}, "not-a-name", "name"),
        ({"config": {"name": "pc", "default": {"t4": 1}}}, "not-a-name", "default"),
    ],
)  # fmt: skip
def test_config_map_names_the_operator_could_not_use_are_refused(
    tmp_path: Path, plugin: dict[str, object], code: str, field: str
) -> None:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump({"devicePlugin": plugin}))
    with pytest.raises(InvalidInput) as exc:
        import_gpu_operator(path)
    (p,) = exc.value.problems
    assert (p.code, p.path) == (code, ("devicePlugin", "config", field)), p
    assert p.fix
