"""Time-slicing and MPS as the NVIDIA device plugin publishes them by default
(`renameByDefault: false`): replicas are `nvidia.com/gpu`, and a pod asking `nvidia.com/gpu: 1`
gets one replica there; `nvidia.com/gpu.shared` does not exist on such nodes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpucarve.config.workload_spec import build_workload
from gpucarve.engine import run_cycle
from gpucarve.render.nvidia import device_plugin_config
from tests.engine.builders import cycle, policy, pool, queue, snapshot, workload


def _policy(rename: bool | None, sharing: str = "time-slicing") -> Any:
    extra = {} if rename is None else {"renameByDefault": rename}
    model = "L40S" if sharing == "time-slicing" else "T4"
    prefix = "l40s" if sharing == "time-slicing" else "t4"
    flavor = f"{prefix}-{'shared' if sharing == 'time-slicing' else 'mps'}"
    return policy(
        pools=[
            pool("train", "H100-SXM5-80GB", 1, 8),
            pool("dev", model, 2, 1, sharing, replicas=4, **extra),
        ],
        queues=[queue("web", {flavor: {"nominal": 8}}), queue("ml", {"h100-full": {"nominal": 8}})],
    )  # fmt: skip


def test_a_deployment_asking_nvidia_com_gpu_gets_replicas_of_an_unrenamed_pool() -> None:
    p = _policy(rename=False)
    (shared,) = [f for f in p.flavors.values() if f.name == "l40s-shared"]
    assert shared.resource_name == "nvidia.com/gpu"
    ws = [workload(p, f"web-{i}", "web", gpus=1) for i in range(8)]
    result, _ = cycle(snapshot(p, ws))
    assert len(result.admissions) == 8
    nodes = sorted({pod.node for a in result.admissions for pod in a.pods})
    assert nodes == ["dev-0", "dev-1"]  # four replicas on each GPU
    # a ninth has no replica left: it waits for room, not for a resource nobody serves
    result = run_cycle(snapshot(p, [*ws, workload(p, "web-8", "web", gpus=1)]), 0)
    (pend,) = result.pending
    assert pend.reason.stage.value in ("placement", "quota")


def test_renamed_pools_keep_nvidia_com_gpu_for_whole_gpus() -> None:
    p = _policy(rename=None)
    result = run_cycle(snapshot(p, [workload(p, "web-0", "web", gpus=1)]), 0)
    (pend,) = result.pending
    assert "no quota for a flavor that serves" in pend.reason.message
    # and nvidia.com/gpu.shared does not exist where replicas are not renamed: refused with
    # the resource to ask for
    q = _policy(rename=False)
    doc = {"name": "w", "namespace": "web", "queue": "web", "podSets": [{"name": "main",
           "count": 1, "resources": {"limits": {"nvidia.com/gpu.shared": 1}}}]}  # fmt: skip
    w, problems = build_workload(doc, q)
    assert w is None
    (problem,) = problems
    assert problem.code == "no-flavor-serves" and "ask for nvidia.com/gpu" in problem.fix


def test_an_mps_pod_asking_nvidia_com_gpu_gets_an_mps_share_not_a_whole_h100() -> None:
    p = _policy(rename=False, sharing="mps")
    result = run_cycle(snapshot(p, [workload(p, "infer", "web", gpus=1)]), 0)
    (adm,) = result.admissions
    assert adm.charged == (("t4-mps", 1),)
    assert adm.pods[0].node.startswith("dev-")


def test_the_device_plugin_configuration_keeps_the_pools_naming() -> None:
    plain = device_plugin_config(_policy(rename=False).pool("dev"))
    assert plain["sharing"]["timeSlicing"]["renameByDefault"] is False
    renamed = device_plugin_config(_policy(rename=None).pool("dev"))
    assert renamed["sharing"]["timeSlicing"]["renameByDefault"] is True


def test_a_device_plugin_configuration_as_deployed_imports_unrenamed(tmp_path: Path) -> None:
    from gpucarve.config.device_plugin_import import import_device_plugin

    path = tmp_path / "plugin.yaml"
    path.write_text(
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
        "    - {name: nvidia.com/gpu, replicas: 4}\n"
    )
    (imported,) = import_device_plugin(path)
    block = imported.pool_block()
    assert block["renameByDefault"] is False and block["replicas"] == 4
    # the block, completed, builds a pool whose replicas a pod gets as nvidia.com/gpu
    p = policy(pools=[{**block, "gpuModel": "L40S", "nodes": 1, "gpusPerNode": 1}],
               queues=[queue("web", {"l40s-shared": {"nominal": 4}})])  # fmt: skip
    result = run_cycle(snapshot(p, [workload(p, "a", "web", gpus=1)]), 0)
    assert len(result.admissions) == 1
