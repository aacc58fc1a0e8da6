"""Read the NVIDIA GPU Operator's configuration: its ClusterPolicy (`kubectl get clusterpolicy
-o yaml`) or the Helm values it was installed with. What gpucarve needs from it: the MIG
strategy (a `single` one makes MIG pools `mig: {strategy: single}`), which ConfigMaps hold the
device plugin's and the MIG manager's configurations (and their defaults), those given inline in
the values (read as `import device-plugin` reads them), and whether GPU Feature Discovery runs
(gpucarve reads its node labels). Everything it does not use is left alone, and said so."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpucarve.config.device_plugin_import import ImportedConfig, one_config
from gpucarve.config.yaml_source import objects_of, parse_yaml, read_yaml_all
from gpucarve.core.problems import InvalidInput, Problem


@dataclass
class OperatorConfig:
    source: str
    mig_strategy: str | None = None
    device_plugin_config_map: str | None = None
    device_plugin_default: str | None = None
    mig_manager_config_map: str | None = None
    mig_manager_default: str | None = None
    gfd: bool = True
    inline: list[ImportedConfig] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _spec(data: Any) -> tuple[dict[str, Any], str] | None:
    """The settings and what held them: a ClusterPolicy's spec, or Helm values."""
    if not isinstance(data, dict):
        return None
    if data.get("kind") == "ClusterPolicy" and isinstance(data.get("spec"), dict):
        return data["spec"], f"ClusterPolicy {(data.get('metadata') or {}).get('name', '')}"
    if data.get("kind") is None and any(k in data for k in ("mig", "devicePlugin", "migManager")):
        return data, "Helm values"
    return None


MIG_STRATEGIES = ("single", "mixed")  # the ClusterPolicy's mig.strategy


def _block(spec: dict[str, Any], key: str) -> dict[str, Any]:
    value = spec.get(key)
    return value if isinstance(value, dict) else {}


def import_gpu_operator(path: str | Path) -> OperatorConfig:
    docs = read_yaml_all(path, "a GPU Operator ClusterPolicy or Helm values")
    found: list[tuple[dict[str, Any], str]] = []
    skipped: list[str] = []
    for doc in docs:
        for obj in objects_of(doc.data):
            got = _spec(obj)
            if got is None:
                kind = obj.get("kind") if isinstance(obj, dict) else type(obj).__name__
                plugins = kind in ("ConfigMap", "DaemonSet")
                hint = "; `gpucarve import device-plugin` reads the plugin's" if plugins else ""
                skipped.append(f"skipped {kind}: not a ClusterPolicy or GPU Operator values{hint}")
            else:
                found.append(got)
    if len(found) != 1:
        raise InvalidInput(
            str(path),
            [
                Problem(
                    (),
                    "not-gpu-operator" if not found else "several-cluster-policies",
                    f"{len(found)} GPU Operator configurations in the file"
                    + (f" ({'; '.join(skipped)})" if skipped else ""),
                    "pass one: `kubectl get clusterpolicy -o yaml` or the operator's values",
                )
            ],
        )
    spec, what = found[0]
    out = OperatorConfig(f"{path}: {what}", notes=skipped)
    mig = _block(spec, "mig")
    out.mig_strategy = str(mig["strategy"]) if "strategy" in mig else None
    if out.mig_strategy not in (None, *MIG_STRATEGIES):
        raise InvalidInput(str(path), [Problem(
            ("mig", "strategy"), "unknown-mig-strategy",
            f"mig.strategy {out.mig_strategy!r} is none the GPU Operator knows",
            f"use one of: {', '.join(MIG_STRATEGIES)}")])  # fmt: skip
    plugin = _block(_block(spec, "devicePlugin"), "config")
    manager = _block(_block(spec, "migManager"), "config")
    named = _names(str(path), {"devicePlugin": plugin, "migManager": manager})
    out.device_plugin_config_map, out.device_plugin_default = named["devicePlugin"]
    out.mig_manager_config_map, out.mig_manager_default = named["migManager"]
    gfd = _block(spec, "gfd")
    out.gfd = gfd.get("enabled", True) is not False
    _inline(out, plugin)
    return out


def _names(source: str, blocks: dict[str, dict[str, Any]]) -> dict[str, tuple[str | None, ...]]:
    """Each block's ConfigMap name and default configuration, which must be strings (a list or
    a map there would name no ConfigMap the operator could mount)."""
    out: dict[str, tuple[str | None, ...]] = {}
    problems = []
    for block, config in blocks.items():
        got: list[str | None] = []
        for key in ("name", "default"):
            value = config.get(key)
            if value is not None and not isinstance(value, str):
                problems.append(Problem((block, "config", key), "not-a-name",
                                        f"{block}.config.{key} {value!r} is not a name",
                                        "write the ConfigMap's name (a configuration's key "
                                        "for default)"))  # fmt: skip
            got.append(value or None if isinstance(value, str) else None)
        out[block] = tuple(got)
    if problems:
        raise InvalidInput(source, problems)
    return out


def _inline(out: OperatorConfig, plugin: dict[str, Any]) -> None:
    """Device-plugin configurations the values give inline (`devicePlugin.config.data`)."""
    data = plugin.get("data")
    if not isinstance(data, dict):
        return
    problems: list[Problem] = []
    for key, text in sorted(data.items()):
        parsed = parse_yaml(str(text), f"{out.source}: devicePlugin.config.data.{key}").data
        got = one_config(str(key), parsed, problems)
        if got is not None:
            out.inline.append(got)
    default = out.device_plugin_default
    if default is not None and default not in data:
        problems.append(Problem(("devicePlugin", "config", "default"), "unknown-default",
                                f"default {default!r} is none of the configurations given "
                                f"({', '.join(sorted(map(str, data)))}): a node without the "
                                "nvidia.com/device-plugin.config label gets none",
                                "name one of them, or add it"))  # fmt: skip
    if problems:
        raise InvalidInput(out.source, problems)


def report(cfg: OperatorConfig) -> list[str]:
    """What the configuration means for a gpucarve policy, one line each."""
    lines = [f"read {cfg.source}"]
    if cfg.mig_strategy == "single":
        lines.append("mig.strategy single: give MIG pools `mig: {strategy: single}` (each "
                     "instance is an nvidia.com/gpu)")  # fmt: skip
    elif cfg.mig_strategy == "mixed":
        lines.append("mig.strategy mixed: MIG pools as gpucarve renders them")
    elif cfg.mig_strategy is None:
        lines.append("mig.strategy unset (the operator's default, single): set it to mixed, or "
                     "give MIG pools `mig: {strategy: single}`")  # fmt: skip
    if cfg.device_plugin_config_map:
        lines.append(
            f"the device plugin reads ConfigMap {cfg.device_plugin_config_map} (default "
            f"{cfg.device_plugin_default or 'none'}): gpucarve import device-plugin reads it "
            "(kubectl get cm -n <operator namespace> NAME -o yaml)"
        )
    if cfg.mig_manager_config_map:
        lines.append(
            f"the MIG manager reads ConfigMap {cfg.mig_manager_config_map} (default "
            f"{cfg.mig_manager_default or 'none'}): gpucarve mig import reads it; for dynamic "
            "MIG point the operator at gpucarve's (gpucarve render gpu-operator)"
        )
    if not cfg.gfd:
        lines.append("gfd.enabled false: gpucarve reads GPU Feature Discovery's node labels "
                     "(model, GPU count, sharing); enable it")  # fmt: skip
    lines += cfg.notes
    return lines
