"""The NVIDIA side rendered from a policy: device-plugin configurations per pool (the formats
of ../shared/reference/sharing-formats.md §3), GPU Operator values; and read back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpucarve.cli.main import app
from gpucarve.config.device_plugin_import import import_device_plugin
from gpucarve.config.policy_build import load_policy
from gpucarve.core.policy import Policy
from gpucarve.core.problems import InvalidInput
from gpucarve.render import nvidia
from tests.paths import BUILTIN

EXAMPLE = BUILTIN / "three-teams.yaml"


def _mps_policy(tmp_path: Path) -> Path:
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["pools"][2]["sharing"] = "mps"
    doc["pools"][2]["replicas"] = 8
    for q in doc["queues"]:
        if "l40s-shared" in q["quota"]:
            q["quota"]["l40s-mps"] = q["quota"].pop("l40s-shared")
    path = tmp_path / "mps.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_each_pool_gets_its_configuration_and_shared_gpus_are_renamed() -> None:
    configs = nvidia.device_plugin_configs(load_policy(EXAMPLE).policy)
    assert sorted(configs) == ["default", "gpucarve-dev", "gpucarve-production",
                               "gpucarve-training"]  # fmt: skip
    for c in configs.values():
        assert c["version"] == "v1" and c["flags"]["migStrategy"] == "mixed"
    ts = configs["gpucarve-dev"]["sharing"]["timeSlicing"]
    assert ts["renameByDefault"] is True
    assert ts["resources"] == [{"name": "nvidia.com/gpu", "replicas": 8}]
    assert "sharing" not in configs["gpucarve-training"]


def test_mps_pools_run_without_the_mixed_strategy(tmp_path: Path) -> None:
    policy = load_policy(_mps_policy(tmp_path)).policy
    dev = nvidia.device_plugin_configs(policy)["gpucarve-dev"]
    assert dev["flags"] == {"migStrategy": "none", "mpsRoot": "/run/nvidia/mps"}
    assert dev["sharing"]["mps"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": 8}]
    values = nvidia.gpu_operator_values(policy)
    assert values["devicePlugin"]["mps"] == {"root": "/run/nvidia/mps"}


def test_gpu_operator_values_select_the_rendered_config_maps() -> None:
    values = nvidia.gpu_operator_values(load_policy(EXAMPLE).policy)
    assert values["mig"] == {"strategy": "mixed"}
    assert values["devicePlugin"]["config"] == {"name": nvidia.DEVICE_PLUGIN_CONFIG_MAP,
                                                "default": "default"}  # fmt: skip
    assert values["migManager"]["config"]["name"] == nvidia.MIG_CONFIG_MAP
    labels = nvidia.node_labels(load_policy(EXAMPLE).policy)
    assert labels["dev"] == {nvidia.CONFIG_LABEL: "gpucarve-dev"}
    assert labels["production"]["nvidia.com/mig.config"] == "gpucarve-production"


def test_render_then_import_gives_the_pools_back(tmp_path: Path) -> None:
    policy = _mps_policy(tmp_path)
    result = CliRunner().invoke(app, ["render", "device-plugin", "--policy", str(policy)])
    assert result.exit_code == 0, result.output
    assert "label its nodes nvidia.com/device-plugin.config=gpucarve-dev" in result.output
    rendered = tmp_path / "cm.yaml"
    rendered.write_text(result.output)
    cm = yaml.safe_load(result.output)
    assert cm["kind"] == "ConfigMap" and "gpucarve-dev" in cm["data"]
    back = {c.pool_block()["name"]: c.pool_block() for c in import_device_plugin(rendered)}
    assert back["dev"] == {"name": "dev", "sharing": "mps", "replicas": 8}
    assert back["training"] == {"name": "training", "sharing": "exclusive"}
    cli = CliRunner().invoke(app, ["import", "device-plugin", str(rendered)])
    assert cli.exit_code == 0, cli.output
    assert "replicas: 8" in cli.output


def _config_file(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(body)
    return path


def test_a_plain_config_file_with_both_modes_takes_mps_as_the_plugin_does(tmp_path: Path) -> None:
    path = _config_file(
        tmp_path,
        """
version: v1
sharing:
  timeSlicing:
    resources: [{name: nvidia.com/gpu, replicas: 10}]
  mps:
    renameByDefault: true
    resources: [{name: nvidia.com/gpu, replicas: 3}]
""",
    )
    (c,) = import_device_plugin(path)
    assert (c.sharing, c.replicas) == ("mps", 3)
    assert any("timeSlicing ignored" in n for n in c.notes)


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ("version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
         "    - {name: nvidia.com/mig-1g.10gb, replicas: 2}\n", "shared-mig"),
        ("version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
         "    - {name: nvidia.com/gpu, replicas: many}\n", "bad-replicas"),
        ("version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
         "    - {name: nvidia.com/gpu, replicas: 2}\n    - {name: nvidia.com/gpu, replicas: 4}\n",
         "several-resources"),
        ("version: v2\n", "bad-version"),
        # what the plugin itself refuses at start: no node would run it as imported
        *[("version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
           f"    - {{name: nvidia.com/gpu, replicas: {n}}}\n", "bad-replicas")
          for n in (0, 1, -3)],
        ("version: v1\nflags: {migStrategy: sideways}\n", "unknown-mig-strategy"),
        ("version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: maybe\n"
         "    resources: [{name: nvidia.com/gpu, replicas: 2}]\n", "not-a-switch"),
        ("version: v1\nsharing:\n  mps:\n    failRequestsGreaterThanOne: 'yes'\n"
         "    resources: [{name: nvidia.com/gpu, replicas: 2}]\n", "not-a-switch"),
        ("version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
         "    - {name: amd.com/gpu, replicas: 2}\n", "unknown-resource"),
        ("kind: ConfigMap\ndata: {}\n", "empty-config-map"),
        ("just: text\n", "not-device-plugin"),
        # the GPU Operator's ClusterPolicy: the other importer reads it, and the fix says so
        ("apiVersion: nvidia.com/v1\nkind: ClusterPolicy\nmetadata: {name: cp}\n"
         "spec: {mig: {strategy: mixed}}\n", "gpu-operator-config"),
    ],
)  # fmt: skip
def test_what_gpucarve_cannot_express_is_refused_with_the_fix(
    tmp_path: Path, body: str, code: str
) -> None:
    with pytest.raises(InvalidInput) as info:
        import_device_plugin(_config_file(tmp_path, body))
    (p,) = info.value.problems
    assert p.code == code and p.fix
    if code == "gpu-operator-config":
        assert "gpucarve import gpu-operator" in p.fix


@pytest.mark.parametrize("key", ["migStrategy", "MIG_STRATEGY"])
def test_a_config_map_holding_only_the_mig_strategy_reads_as_the_plugins_flag(
    tmp_path: Path, key: str
) -> None:
    body = f"kind: ConfigMap\nmetadata: {{name: mig-strategy}}\ndata: {{{key}: mixed}}\n"
    (got,) = import_device_plugin(_config_file(tmp_path, body))
    assert got.name == "mig-strategy" and got.sharing == "exclusive"
    assert any("migStrategy mixed" in n and "sharing: mig" in n for n in got.notes)


@pytest.mark.parametrize(
    "body",
    [
        "version: v1\nsharing: [timeSlicing]\n",
        "version: v1\nsharing: {timeSlicing: 4}\n",
        "version: v1\nsharing: {timeSlicing: {resources: {name: nvidia.com/gpu}}}\n",
        "version: v1\nsharing: {mps: {resources: [nvidia.com/gpu]}}\n",
    ],
)
def test_a_malformed_sharing_block_is_refused_never_read_as_exclusive(
    tmp_path: Path, body: str
) -> None:
    with pytest.raises(InvalidInput) as err:
        import_device_plugin(_config_file(tmp_path, body))
    (problem,) = err.value.problems
    assert problem.code == "bad-config" and "sharing" in str(problem.location), problem


def test_configurations_import_as_clusters_keep_them(tmp_path: Path) -> None:
    """Several `---` documents: a ConfigMap keyed by GFD product names, a mig-parted ConfigMap,
    an object of another kind and the plugin's DaemonSet; every configuration is read, models
    come from the product names, pool names are valid, and nothing is dropped unsaid."""
    path = tmp_path / "cluster.yaml"
    path.write_text(
        """apiVersion: v1
kind: ConfigMap
metadata: {name: plugin-configs}
data:
  A100-SXM4-80GB: |
    version: v1
    flags: {migStrategy: mixed}
  Tesla-T4: |
    version: v1
    sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 4}]}}
---
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: custom-mig-config}
  data:
    config.yaml: |
      version: v1
      mig-configs: {all-disabled: [{devices: all, mig-enabled: false}]}
- apiVersion: nvidia.com/v1
  kind: MigManager
  metadata: {name: mm}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: nvidia-device-plugin}
spec:
  template:
    spec:
      containers:
      - name: nvidia-device-plugin-ctr
        image: nvidia/k8s-device-plugin:v0.17.0
        args: ["--mig-strategy=mixed"]
"""
    )
    imported = import_device_plugin(path)
    blocks = {c.pool_block()["name"]: c.pool_block() for c in imported}
    assert set(blocks) == {"a100-sxm4-80gb", "tesla-t4", "nvidia-device-plugin"}
    assert blocks["a100-sxm4-80gb"]["gpuModel"] == "A100-80GB"
    assert blocks["tesla-t4"] == {
        "name": "tesla-t4", "sharing": "time-slicing", "gpuModel": "T4", "replicas": 4,
        "renameByDefault": False,
    }  # fmt: skip
    notes = [n for c in imported for n in c.notes]
    assert any("skipped MigManager mm" in n for n in notes)
    assert any("custom-mig-config" in n and "gpucarve mig import" in n for n in notes)
    assert sum("migStrategy mixed" in n for n in notes) == 2  # the ConfigMap's and the flags'


def test_a_malformed_daemon_set_is_named_not_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / "ds.yaml"
    path.write_text(
        "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: odd}\n"
        "spec: {template: {spec: {containers: 5}}}\n---\n"
        "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: plugin}\n"
        "spec: {template: {spec: {containers: [{name: nvidia-device-plugin, args: oops, "
        "env: 3}]}}}\n"
    )
    (c,) = import_device_plugin(path)  # the second reads as a plugin with no flags
    assert c.pool_block()["name"] == "plugin" and c.sharing == "exclusive"
    assert any("DaemonSet odd: runs no NVIDIA device plugin container" in n for n in c.notes)


def _dra_doc() -> dict[str, Any]:
    from tests.paths import EXAMPLES

    doc: dict[str, Any] = yaml.safe_load((EXAMPLES / "dra" / "policy.yaml").read_text())
    return doc


def _load(tmp_path: Path, doc: object, name: str = "p.yaml") -> Policy:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    loaded = load_policy(path).policy
    assert loaded is not None
    return loaded


def test_dra_pools_get_no_device_plugin_configuration_but_the_label_that_keeps_it_off(
    tmp_path: Path,
) -> None:
    from gpucarve.render.migparted import mig_parted_config

    policy = _load(tmp_path, _dra_doc())
    configs = nvidia.device_plugin_configs(policy)
    assert set(configs) == {"default", "gpucarve-a100"}  # the one device-plugin pool
    labels = nvidia.node_labels(policy)
    assert labels["a100"][nvidia.CONFIG_LABEL] == "gpucarve-a100"
    for pool in ("h100", "a100-mig", "l40s"):
        assert nvidia.CONFIG_LABEL not in labels[pool]
        assert labels[pool]["nvidia.com/gpu.deploy.device-plugin"] == "false"
    # a fixed DRA MIG layout is still the MIG manager's to make; the driver publishes it
    assert "gpucarve-a100-mig" in mig_parted_config(policy)["mig-configs"]
    # the command prints labels for the device-plugin pools only (no KeyError on DRA pools)
    path = tmp_path / "p.yaml"
    out = CliRunner().invoke(app, ["render", "device-plugin", "--policy", str(path)])
    assert out.exit_code == 0, out.output
    assert "pool a100:" in out.output and "pool h100:" not in out.output


def test_dynamic_dra_mig_is_the_drivers_and_an_all_dra_policy_switches_the_plugin_off(
    tmp_path: Path,
) -> None:
    from gpucarve.render.migparted import mig_parted_config

    doc = _dra_doc()
    doc["pools"] = [p for p in doc["pools"] if p.get("devices") == "dra"]
    for p in doc["pools"]:
        if p["name"] == "a100-mig":
            p["mig"]["dynamic"] = {"profiles": ["7g.80gb"]}
    for q in doc["queues"]:
        q["quota"] = {k: v for k, v in q["quota"].items() if "-dra-" in k}
    policy = _load(tmp_path, doc)
    assert "gpucarve-a100-mig" not in mig_parted_config(policy)["mig-configs"]
    assert nvidia.MIG_CONFIG_LABEL not in nvidia.node_labels(policy)["a100-mig"]
    values = nvidia.gpu_operator_values(policy)
    assert values["devicePlugin"] == {"enabled": False}


def test_a_configuration_given_twice_is_refused_never_dropped(tmp_path: Path) -> None:
    one = nvidia.device_plugin_config_map(load_policy(EXAMPLE).policy, "gpu-operator")
    other = {**one, "metadata": {**one["metadata"], "name": "another"}}
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump(one) + "---\n" + yaml.safe_dump(other))
    with pytest.raises(InvalidInput) as exc:
        import_device_plugin(path)
    codes = {p.code for p in exc.value.problems}
    assert codes == {"duplicate-config"}, exc.value.problems
    assert any("another" in str(p.location) for p in exc.value.problems)


def test_what_the_plugin_drops_is_said_and_not_imported(tmp_path: Path) -> None:
    """The device plugin discards a resource's own `rename` and `devices`: the import reads
    the configuration as the plugin runs it (unrenamed, every GPU shared) and says so."""
    path = _config_file(
        tmp_path,
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
        "    - {name: nvidia.com/gpu, replicas: 4, rename: team.io/slice, devices: [0, 1]}\n",
    )
    (c,) = import_device_plugin(path)
    assert (c.sharing, c.replicas, c.renamed) == ("time-slicing", 4, False)
    assert any("rename 'team.io/slice' ignored" in n for n in c.notes), c.notes
    assert any("devices [0, 1] ignored" in n for n in c.notes), c.notes
