"""mig-parted configurations read back into pool `mig:` blocks, with checked layouts."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpucarve.config.catalog_file import packaged_catalog
from gpucarve.config.migparted_import import import_mig_config
from gpucarve.config.policy_build import load_policy
from gpucarve.core.problems import InvalidInput
from gpucarve.render.migparted import mig_parted_config
from tests.paths import BUILTIN

EXAMPLE = BUILTIN / "three-teams.yaml"
A100_80 = ["0x20B210DE", "0x20B510DE"]
A100_40 = ["0x20B010DE"]


def write(tmp_path: Path, doc: object) -> Path:
    p = tmp_path / "mig.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def test_render_then_import_gives_the_pool_layout_back(tmp_path: Path) -> None:
    cfg = mig_parted_config(load_policy(EXAMPLE).policy)
    blocks = import_mig_config(write(tmp_path, cfg), packaged_catalog(), "gpucarve-production")
    assert blocks == {"A100-80GB": {"layout": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}}}


def test_device_filters_pick_the_model_like_the_gpu_operator_configs(tmp_path: Path) -> None:
    doc = {
        "version": "v1",
        "mig-configs": {
            "all-1g": [
                {"device-filter": A100_80, "devices": "all", "mig-enabled": True,
                 "mig-devices": {"1g.10gb": 7}},
                {"device-filter": A100_40, "devices": "all", "mig-enabled": True,
                 "mig-devices": {"1g.5gb": 7}},
            ],
            "split": [
                {"devices": [0, 1], "mig-enabled": True, "mig-devices": {"7g.80gb": 1}},
                {"devices": [2], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}},
            ],
        },
    }  # fmt: skip
    path = write(tmp_path, doc)
    cat = packaged_catalog()
    blocks = import_mig_config(path, cat, "all-1g")
    assert blocks == {
        "A100-80GB": {"layout": {"1g.10gb": 7}},
        "A100-SXM4-40GB": {"layout": {"1g.5gb": 7}},
    }
    split = import_mig_config(path, cat, "split", cat.lookup("H100-SXM5-80GB"))
    assert split == {
        "H100-SXM5-80GB": {
            "perGpu": [
                {"gpus": [0, 1], "layout": {"7g.80gb": 1}},
                {"gpus": [2], "layout": {"3g.40gb": 2}},
            ]
        }
    }


@pytest.mark.parametrize(
    ("entry", "config", "code"),
    [
        ({"device-filter": A100_80, "devices": "all", "mig-enabled": True,
          "mig-devices": {"3g.40gb": 3}}, "c", "bad-layout"),
        ({"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 1}}, "c",
         "unknown-device"),
        ({"device-filter": A100_80, "devices": "all", "mig-enabled": True,
          "mig-devices": {"1g.10gb": "seven"}}, "c", "bad-mig-devices"),
        ({"device-filter": A100_80, "devices": "all", "mig-enabled": True,
          "mig-devices": {"1g.10gb": 1}}, "nope", "unknown-config"),
    ],
)  # fmt: skip
def test_bad_configs_name_the_entry_and_the_fix(
    tmp_path: Path, entry: dict[str, object], config: str, code: str
) -> None:
    path = write(tmp_path, {"version": "v1", "mig-configs": {"c": [entry]}})
    with pytest.raises(InvalidInput) as err:
        import_mig_config(path, packaged_catalog(), config)
    problem = err.value.problems[0]
    assert problem.code == code and problem.fix


def test_not_a_mig_parted_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput) as err:
        import_mig_config(write(tmp_path, {"apiVersion": "v1"}), packaged_catalog())
    assert err.value.problems[0].code == "not-mig-parted"


def test_every_configuration_of_a_config_map_as_deployed_at_once(tmp_path: Path) -> None:
    from gpucarve.config.migparted_import import import_mig_configs

    inner = {
        "version": "v1",
        "mig-configs": {
            "all-disabled": [{"devices": "all", "mig-enabled": False}],
            "all-1g.10gb": [{"device-filter": "0x20B510DE", "devices": "all",
                             "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}],
            "mixed": [
                {"device-filter": "0x20B510DE", "devices": [0, 1], "mig-enabled": True,
                 "mig-devices": {"3g.40gb": 2}},
                {"device-filter": "0x20B510DE", "devices": [2, 3], "mig-enabled": False},
            ],
            "nofilter": [{"devices": "all", "mig-enabled": True, "mig-devices": {"7g.80gb": 1}}],
        },
    }  # fmt: skip
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "custom-mig-config"},
          "data": {"config.yaml": yaml.safe_dump(inner)}}  # fmt: skip
    other = {"apiVersion": "nvidia.com/v1", "kind": "MigManager", "metadata": {"name": "mm"}}
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all([cm, other]))
    found = import_mig_configs(path, packaged_catalog())
    assert found.configs["all-1g.10gb"] == {"A100-80GB": {"layout": {"1g.10gb": 7}}}
    assert found.configs["mixed"] == {
        "A100-80GB": {"perGpu": [{"gpus": [0, 1], "layout": {"3g.40gb": 2}}]}
    }
    # GPUs left without MIG are said, never dropped
    assert found.whole == {"all-disabled": ["devices 'all'"], "mixed": ["devices [2, 3]"]}
    assert "nofilter" not in found.configs
    assert any("nofilter" in n and "--model" in n for n in found.notes)
    assert any("MigManager mm" in n for n in found.notes)
    with_model = import_mig_configs(
        path, packaged_catalog(), packaged_catalog().lookup("A100-80GB")
    )
    assert with_model.configs["nofilter"] == {"A100-80GB": {"layout": {"7g.80gb": 1}}}
