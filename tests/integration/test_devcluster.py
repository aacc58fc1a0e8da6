"""`gpucarve dev-cluster up` starts the real stack with the policy's nodes; `down` stops it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpucarve.cli.main import app
from tests.integration.api import Api, wait_for
from tests.paths import BUILTIN

pytestmark = pytest.mark.integration
EXAMPLE = BUILTIN / "three-teams.yaml"


def test_up_creates_ready_gpu_nodes_and_down_stops_it(tmp_path: Path) -> None:
    state = tmp_path / "dc"
    runner = CliRunner()
    r = runner.invoke(app, ["dev-cluster", "up", "--policy", str(EXAMPLE), "--dir", str(state)])
    assert r.exit_code == 0, r.output
    pids = json.loads((state / "pids.json").read_text())
    try:
        config = json.loads((state / "kubeconfig-gpucarve-admin").read_text())
        api = Api(config["clusters"][0]["cluster"]["server"], config["users"][0]["user"]["token"])

        def ready() -> int:
            items = api.get("/api/v1/nodes")["items"]
            return sum(
                any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in n["status"].get("conditions", [])
                )
                for n in items
            )

        assert wait_for(lambda: ready() == 18, what="18 Ready nodes")
        again = runner.invoke(
            app, ["dev-cluster", "up", "--policy", str(EXAMPLE), "--dir", str(state)]
        )
        assert again.exit_code == 2 and "already runs" in again.output
    finally:
        r = runner.invoke(app, ["dev-cluster", "down", "--dir", str(state)])
    assert r.exit_code == 0, r.output
    for pid in pids.values():
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert (state / "kube-apiserver.log").exists()
