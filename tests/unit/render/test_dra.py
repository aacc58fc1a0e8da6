"""`gpucarve render dra`: the DeviceClasses the DRA pools' claims name and the label that keeps
the device plugin off their nodes; a policy without DRA pools has nothing to render, and says
which setting is missing."""

from __future__ import annotations

import yaml
from typer.testing import CliRunner

from gpucarve.cli.main import app
from tests.paths import BUILTIN, EXAMPLES


def test_device_classes_and_labels_of_the_dra_pools() -> None:
    result = CliRunner().invoke(
        app, ["render", "dra", "--policy", str(EXAMPLES / "dra" / "policy.yaml")]
    )
    assert result.exit_code == 0, result.output
    objs = [o for o in yaml.safe_load_all(result.stdout) if o]
    selectors = {
        o["metadata"]["name"]: o["spec"]["selectors"][0]["cel"]["expression"] for o in objs
    }
    assert selectors == {
        "gpu.nvidia.com": "device.driver == 'gpu.nvidia.com' && "
        "device.attributes['gpu.nvidia.com'].type == 'gpu'",
        "mig.nvidia.com": "device.driver == 'gpu.nvidia.com' && "
        "device.attributes['gpu.nvidia.com'].type == 'mig'",
    }
    labels = [line for line in result.stdout.splitlines() if line.startswith("# pool")]
    assert labels == [
        f"# pool {p}: label its nodes nvidia.com/gpu.deploy.device-plugin=false"
        for p in ("a100-mig", "h100", "l40s")
    ]


def test_without_dra_pools_it_says_what_to_set() -> None:
    result = CliRunner().invoke(
        app, ["render", "dra", "--policy", str(BUILTIN / "three-teams.yaml")]
    )
    assert result.exit_code == 2
    assert "no pool of the policy is DRA-managed" in result.stderr
    assert "devices: dra" in result.stderr
