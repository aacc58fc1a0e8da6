"""A fraction with a request and a limit, on the real API server with the stack as shipped (the
webhook gives the pod its device ConfigMap): asked 0.25 of a GPU up to 0.5, it is charged 0.25
(one of the GPU's four time-slicing replicas), its ConfigMap carries both (and the limiter's
caps at the limit), and its share of the GPU (`gpucarve.io/gpu-share`) is 0.5 while it is alone
there and 0.25 once a 0.75 neighbour is bound beside it; its memory (4 GiB up to 16 GiB) bursts
the same way, to what the neighbour's 30,000 MiB leave of the GPU's 45,373."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpucarve.cli.main import app
from gpucarve.core.vocabulary import GPU_SHARE_ANNOTATION
from tests.integration.api import Api, wait_for
from tests.integration.kube_pods import create_pod, node_of, pod, pods_in
from tests.integration.stack_setup import populated, scheduling

pytestmark = pytest.mark.integration

POLICY: dict[str, Any] = {
    "apiVersion": "gpucarve.io/v1alpha1",
    "kind": "Policy",
    "metadata": {"name": "burst"},
    "pools": [
        {"name": "dev", "gpuModel": "L40S", "nodes": 1, "gpusPerNode": 1,
         "sharing": "time-slicing", "replicas": 4},
    ],
    "queues": [
        {"name": "notebooks", "namespaces": ["notebooks"],
         "quota": {"l40s-shared": {"nominal": 4}}},
    ],
}  # fmt: skip
L40S_MIB = 45373  # the catalog's


def _fraction(name: str, annotations: dict[str, str]) -> dict[str, Any]:
    p = pod("notebooks", name, "nvidia.com/gpu.shared")
    del p["spec"]["schedulerName"]  # the webhook sends it to gpucarve
    del p["spec"]["containers"][0]["resources"]
    p["metadata"]["annotations"] = annotations
    return p


def _share(api: Api, name: str) -> dict[str, Any] | None:
    raw = (pods_in(api, "notebooks")[name]["metadata"].get("annotations") or {}).get(
        GPU_SHARE_ANNOTATION
    )
    return None if raw is None else dict(json.loads(raw))


def test_a_fraction_bursts_to_its_limit_alone_and_back_to_its_request_beside_a_neighbour(
    tmp_path: Path,
) -> None:
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(yaml.safe_dump(POLICY))
    with (
        populated(tmp_path, policy_file, ["notebooks"]) as (stack, api, _),
        scheduling(stack, policy_file),
    ):
        create_pod(api, _fraction("burst", {
            "gpucarve.io/gpu-fraction": "250", "gpucarve.io/gpu-fraction-limit": "500",
            "gpucarve.io/gpu-memory": "4096", "gpucarve.io/gpu-memory-limit": "16384",
        }))  # fmt: skip
        node = wait_for(lambda: node_of(pods_in(api, "notebooks")["burst"]),
                        what="the bursting fraction bound")  # fmt: skip
        made = pods_in(api, "notebooks")["burst"]
        assigned = json.loads(made["metadata"]["annotations"]["gpucarve.io/assignment"])
        assert len(assigned["slices"]) == 1  # charged its request: one of four replicas
        name = made["metadata"]["annotations"]["gpucarve.io/device-config"]
        status, config = api.call("GET", f"/api/v1/namespaces/notebooks/configmaps/{name}")
        assert status == 200, config
        data = config["data"]
        assert data["GPUCARVE_GPU_FRACTION_REQUEST"] == "250"
        assert data["GPUCARVE_GPU_FRACTION_LIMIT"] == "500"
        assert data["GPUCARVE_GPU_MEMORY_REQUEST_MIB"] == "4096"
        assert data["GPUCARVE_GPU_MEMORY_LIMIT_MIB"] == "16384"
        assert data["CUDA_DEVICE_SM_LIMIT"] == "50" and data["CUDA_DEVICE_MEMORY_LIMIT"] == "16384m"

        alone = wait_for(lambda: _share(api, "burst"), what="its share written")
        assert alone["gpu"] == f"{node}/gpu0"
        assert alone["fraction"] == {"request": 250, "limit": 500, "now": 500}
        assert alone["memoryMiB"] == {"request": 4096, "limit": 16384, "now": 16384}

        create_pod(api, _fraction("neighbour", {"gpucarve.io/gpu-fraction": "750",
                                                "gpucarve.io/gpu-memory": "30000"}))  # fmt: skip
        wait_for(lambda: node_of(pods_in(api, "notebooks")["neighbour"]) == node,
                 what="the neighbour bound on the same GPU")  # fmt: skip

        def shrunk() -> dict[str, Any] | None:
            got = _share(api, "burst")
            return got if got and got["fraction"]["now"] == 250 else None

        beside = wait_for(shrunk, what="the burst back to its request")
        # memory: what the neighbour's request leaves, up to the limit
        assert beside["memoryMiB"]["now"] == L40S_MIB - 30000  # 15,373: below its 16,384
        assert _share(api, "neighbour") is None  # no limit: nothing to burst, no share kept
        args = ["explain", "notebooks/burst", "--policy", str(policy_file), "--kubeconfig",
                str(stack.kubeconfig())]  # fmt: skip
        said = CliRunner().invoke(app, args)
        assert said.exit_code == 0, said.output
        assert "0.25 GPU now (request 0.25, limit 0.5)" in said.stdout, said.stdout
        assert "15373 MiB now (request 4096, limit 16384)" in said.stdout, said.stdout
