"""The devices pods really got: read from a PodResources server of the tests' own over its
Unix socket with the generated client, mapped to device units through the NVML seam, and
resolved to the scheduler's slices (the real device first, the assumed slices where the
report leaves a choice)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpucarve.agent.pod_devices import PodResourcesError, list_pod_devices, units_by_pod
from gpucarve.agent.readings import DeviceSlot
from gpucarve.config.policy_build import load_policy
from gpucarve.core.cluster import build_cluster
from gpucarve.kube.view.nodes.device_truth import gpus_in_use, pod_devices, resolve
from tests.paths import BUILTIN
from tests.pod_resources_server import PodResourcesServer

SLOTS = {
    "GPU-a": DeviceSlot(0),
    "GPU-b": DeviceSlot(1),
    "MIG-x": DeviceSlot(1, "3g.40gb", 4),
    "MIG-y": DeviceSlot(1, "1g.10gb", None),  # NVML gave no placement
}


def test_the_kubelets_list_is_read_over_its_socket_and_mapped(tmp_path: Path) -> None:
    with PodResourcesServer(tmp_path / "kubelet.sock") as server:
        server.pods = [
            ("research", "train", "nvidia.com/gpu", ["GPU-b", "GPU-a"]),
            ("serving", "chat", "nvidia.com/mig-3g.40gb", ["MIG-x"]),
            ("dev", "nb", "nvidia.com/gpu.shared", ["GPU-a::3", "GPU-a::5"]),
            ("dev", "gone", "nvidia.com/gpu", ["GPU-zz"]),
            ("kube-system", "dns", "example.com/thing", ["t-1"]),
        ]
        pods = list_pod_devices(str(tmp_path / "kubelet.sock"))
    assert [(p.namespace, p.name, p.resource) for p in pods] == [
        ("research", "train", "nvidia.com/gpu"), ("serving", "chat", "nvidia.com/mig-3g.40gb"),
        ("dev", "nb", "nvidia.com/gpu.shared"), ("dev", "gone", "nvidia.com/gpu")]  # fmt: skip
    units, unknown = units_by_pod(pods, SLOTS)
    assert units == {
        "dev/nb": ["gpu0", "gpu0"],  # one unit per replica
        "research/train": ["gpu0", "gpu1"],
        "serving/chat": ["gpu1/3g.40gb@4"],
    }
    assert unknown == ["GPU-zz"]


def test_no_kubelet_is_one_error_naming_the_socket(tmp_path: Path) -> None:
    with pytest.raises(PodResourcesError, match=r"kubelet\.sock"):
        list_pod_devices(str(tmp_path / "kubelet.sock"), timeout_s=0.5)


POLICY = load_policy(BUILTIN / "three-teams.yaml").policy
CLUSTER = build_cluster(POLICY)


def test_units_resolve_to_slices_preferring_the_assumed_where_free_to_choose() -> None:
    assert resolve(CLUSTER, "training-0", ["gpu3", "gpu5"], []) == (
        "training-0/gpu3", "training-0/gpu5")  # fmt: skip
    mig = [s for s in CLUSTER.slices if s.startswith("production-0/gpu1/")]
    one_g = sorted(s for s in mig if "/1g.10gb@" in s)
    assert len(one_g) == 2
    # no placement: the assumed instance of that profile if it is one, else the first
    assert resolve(CLUSTER, "production-0", ["gpu1/1g.10gb"], [one_g[1]]) == (one_g[1],)
    assert resolve(CLUSTER, "production-0", ["gpu1/1g.10gb"], []) == (one_g[0],)
    exact = next(s for s in mig if "/3g.40gb@" in s)
    assert resolve(CLUSTER, "production-0", [exact.split("/", 1)[1]], []) == (exact,)
    # two replicas of a time-sliced GPU: the assumed ones kept
    assumed = ("dev-0/gpu0/r5", "dev-0/gpu0/r6")
    assert resolve(CLUSTER, "dev-0", ["gpu0", "gpu0"], assumed) == assumed
    # nothing there: the report cannot be used
    assert resolve(CLUSTER, "training-0", ["gpu9"], []) is None
    assert resolve(CLUSTER, "production-0", ["gpu1/7g.80gb@0"], []) is None
    assert resolve(CLUSTER, "nowhere", ["gpu0"], []) is None


def test_the_node_annotation_reads_back_and_names_the_busy_gpus() -> None:
    raw = '{"a/p":["gpu1/3g.40gb@4"],"b/q":["gpu0","gpu2"]}'
    node = {"metadata": {"name": "n", "annotations": {"gpucarve.io/pod-devices": raw}}}
    got = pod_devices(node)
    assert got == {"a/p": ("gpu1/3g.40gb@4",), "b/q": ("gpu0", "gpu2")}
    assert gpus_in_use({k: ("n", v) for k, v in got.items()}) == {"n/gpu0", "n/gpu1", "n/gpu2"}
    broken = {"metadata": {"name": "n", "annotations": {"gpucarve.io/pod-devices": "{"}}}
    assert pod_devices(broken) == {}
