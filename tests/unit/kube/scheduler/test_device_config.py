"""A fraction-only pod's device ConfigMap: the GPUs from its slices, the limiter's variables."""

from __future__ import annotations

from gpucarve.config.policy_build import load_policy
from gpucarve.core.cluster import gpu_of_slice
from gpucarve.core.vocabulary import DEVICE_CONFIG_ANNOTATION as DEVICE_CONFIG
from gpucarve.core.workload import PodAssignment
from gpucarve.kube.scheduler.device_config import environment
from gpucarve.kube.view.pods.assigned import Assigned
from gpucarve.webhook.admission import mutate
from tests.paths import BUILTIN

POLICY = load_policy(BUILTIN / "three-teams.yaml").policy


def test_gpu_indices_and_limiter_variables() -> None:
    assert [gpu_of_slice(s) for s in ("dev-0/gpu0/r1", "dev-0/gpu3", "dev-0/x")] == [0, 3, None]
    pod = PodAssignment("w/p-0", "p", "dev-0", ("dev-0/gpu0/r1", "dev-0/gpu0/r2", "dev-0/gpu3/r0"),
                        "l40s-shared", 8192)  # fmt: skip
    placed = Assigned.placed(pod, 500)
    assert placed.gpus == (0, 3)  # in order, once each
    env = environment(Assigned.placed(PodAssignment("w/p-0", "p", "dev-0", ("dev-0/gpu2/r1",),
                                                    "l40s-shared", 8192), 500))  # fmt: skip
    assert env == {"NVIDIA_VISIBLE_DEVICES": "2", "CUDA_DEVICE_MEMORY_LIMIT": "8192m",
                   "CUDA_DEVICE_SM_LIMIT": "50", "GPUCARVE_GPU_FRACTION_REQUEST": "500",
                   "GPUCARVE_GPU_FRACTION_LIMIT": "500", "GPUCARVE_GPU_MEMORY_REQUEST_MIB": "8192",
                   "GPUCARVE_GPU_MEMORY_LIMIT_MIB": "8192"}  # fmt: skip
    # memory only: no compute limit
    assert "CUDA_DEVICE_SM_LIMIT" not in environment(Assigned.placed(pod, 0))


def test_a_bursting_fraction_carries_its_request_and_its_limit_as_the_pool_enforces_them() -> None:
    pod = PodAssignment("w/p-0", "p", "dev-0", ("dev-0/gpu1/r0",), "l40s-shared", 4096)
    sliced = environment(Assigned.placed(pod, 250, "q", (500, 8192)))
    assert sliced["GPUCARVE_GPU_FRACTION_REQUEST"] == "250"
    assert sliced["GPUCARVE_GPU_FRACTION_LIMIT"] == "500"
    assert sliced["GPUCARVE_GPU_MEMORY_REQUEST_MIB"] == "4096"
    assert sliced["GPUCARVE_GPU_MEMORY_LIMIT_MIB"] == "8192"
    # the limiter caps at the limit: the burst is what the GPU's room allows up to it
    assert sliced["CUDA_DEVICE_SM_LIMIT"] == "50" and sliced["CUDA_DEVICE_MEMORY_LIMIT"] == "8192m"
    mps = environment(Assigned.placed(pod, 250, "q", (500, 8192), mps=True))
    assert mps["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    assert mps["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=8192M"
    assert "CUDA_DEVICE_SM_LIMIT" not in mps and mps["GPUCARVE_GPU_FRACTION_REQUEST"] == "250"


def test_the_webhook_names_the_config_map_only_for_fraction_only_pods() -> None:
    frac = {
        "metadata": {"namespace": "notebooks", "annotations": {"gpucarve.io/gpu-fraction": "250"}},
        "spec": {"containers": [{"name": "a"}, {"name": "b", "envFrom": [{"secretRef": {}}]}]},
    }
    m = mutate(POLICY, frac, "gpucarve", "ABC-123")
    assert m.annotations[DEVICE_CONFIG] == "gpucarve-gpu-abc-123"
    ops = {op["path"]: op["value"] for op in m.patch}
    ref = {"configMapRef": {"name": "gpucarve-gpu-abc-123"}}
    assert ops["/spec/containers/0/envFrom"] == [ref]
    assert ops["/spec/containers/1/envFrom/-"] == ref
    whole = {
        "metadata": {"namespace": "research"},
        "spec": {"containers": [{"name": "a", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }
    assert DEVICE_CONFIG not in mutate(POLICY, whole, "gpucarve", "X").annotations


def test_explain_reads_a_bursting_fractions_share_and_names_an_unreadable_one() -> None:
    from gpucarve.kube.scheduler.explain import share_line

    share = ('{"fraction":{"limit":500,"now":250,"request":250},"gpu":"dev-0/gpu0",'
             '"memoryMiB":{"limit":16384,"now":15373,"request":4096}}')  # fmt: skip
    obj = {"metadata": {"annotations": {"gpucarve.io/gpu-share": share}}}
    assert share_line(obj) == (
        "its share of dev-0/gpu0 (its neighbours' requests leave it): 0.25 GPU now (request "
        "0.25, limit 0.5); 15373 MiB now (request 4096, limit 16384)"
    )
    assert share_line({"metadata": {}}) is None
    bad = share_line({"metadata": {"annotations": {"gpucarve.io/gpu-share": "{oops"}}})
    assert bad is not None and "unreadable" in bad
