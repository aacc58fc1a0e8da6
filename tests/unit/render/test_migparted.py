"""The mig-parted configuration rendered from a policy: the format mig-parted reads, one
configuration per pool on a MIG-capable model, layouts that place on the GPU."""

from __future__ import annotations

import yaml
from typer.testing import CliRunner

from gpucarve.cli.main import app
from gpucarve.config.catalog_file import packaged_catalog
from gpucarve.config.policy_build import build_policy, load_policy
from gpucarve.core.mig import place
from gpucarve.render.migparted import mig_parted_config
from tests.paths import BUILTIN

EXAMPLE = BUILTIN / "three-teams.yaml"


def test_example_renders_one_config_per_mig_capable_pool() -> None:
    cfg = mig_parted_config(load_policy(EXAMPLE).policy)
    assert cfg["version"] == "v1"
    assert set(cfg["mig-configs"]) == {"gpucarve-production", "gpucarve-training"}  # L40S: no MIG
    (prod,) = cfg["mig-configs"]["gpucarve-production"]
    assert prod["devices"] == "all" and prod["mig-enabled"] is True
    assert prod["mig-devices"] == {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
    assert "0x20B210DE" in prod["device-filter"]
    (train,) = cfg["mig-configs"]["gpucarve-training"]
    assert train["mig-enabled"] is False and "mig-devices" not in train
    geom = packaged_catalog().lookup("A100-80GB").mig
    assert geom is not None and place(geom, prod["mig-devices"]).ok


def test_per_gpu_layouts_get_one_entry_per_index() -> None:
    doc = yaml.safe_load(EXAMPLE.read_text())
    prod = next(p for p in doc["pools"] if p["name"] == "production")
    prod["mig"] = {
        "perGpu": [{"gpus": [0], "layout": {"3g.40gb": 2}}, {"gpus": [1], "layout": {"1g.10gb": 7}}]
    }
    for queue in doc["queues"]:
        queue["quota"].pop("a100-mig-2g.20gb", None)  # no pool provides it any more
    policy = build_policy(doc, packaged_catalog()).policy
    entries = mig_parted_config(policy)["mig-configs"]["gpucarve-production"]
    assert [(e["devices"], e["mig-devices"]) for e in entries] == [
        ([0], {"3g.40gb": 2}),
        ([1], {"1g.10gb": 7}),
    ]


def test_cli_prints_yaml_with_the_node_labels() -> None:
    r = CliRunner().invoke(app, ["render", "mig-config", "--policy", str(EXAMPLE)])
    assert r.exit_code == 0, r.output
    assert "nvidia.com/mig.config=gpucarve-production" in r.output
    assert yaml.safe_load(r.output)["version"] == "v1"
