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


def test_the_dev_cluster_runs_controllers_and_the_webhook(tmp_path: Path) -> None:
    """A Deployment makes pods (the controllers run), and a GPU pod written for the default
    scheduler in a governed namespace reaches gpucarve (the webhook sets schedulerName), while
    one asking for a profile no pool has is refused with the fix."""
    state = tmp_path / "dc"
    runner = CliRunner()
    r = runner.invoke(app, ["dev-cluster", "up", "--policy", str(EXAMPLE), "--dir", str(state)])
    assert r.exit_code == 0, r.output
    pids = json.loads((state / "pids.json").read_text())
    assert {"webhook", "kube-controller-manager"} <= set(pids)
    try:
        config = json.loads((state / "kubeconfig-gpucarve-admin").read_text())
        api = Api(config["clusters"][0]["cluster"]["server"], config["users"][0]["user"]["token"])
        container = {"name": "main", "image": "fake",
                     "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}}  # fmt: skip
        deployment = {
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "infer", "namespace": "production"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "infer"}},
                     "template": {"metadata": {"labels": {"app": "infer"}},
                                  "spec": {"containers": [container]}}},
        }  # fmt: skip
        api.create("/apis/apps/v1/namespaces/production/deployments", deployment)

        def made() -> list[dict[str, object]] | None:
            items = api.get("/api/v1/namespaces/production/pods")["items"]
            return items if len(items) == 2 else None

        pods = wait_for(made, timeout_s=60, what="the Deployment's pods")
        assert all(p["spec"]["schedulerName"] == "gpucarve" for p in pods)  # type: ignore[index]
        bad = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "bad", "namespace": "production"},
               "spec": {"containers": [{**container, "resources": {"limits": {
                   "nvidia.com/mig-4g.40gb": "1"}}}]}}  # fmt: skip
        status, body = api.call("POST", "/api/v1/namespaces/production/pods", bad)
        assert status == 403 and "4g.40gb" in str(body) and "fix" in str(body)  # denied
    finally:
        r = runner.invoke(app, ["dev-cluster", "down", "--dir", str(state)])
    assert r.exit_code == 0, r.output
    for pid in pids.values():
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
