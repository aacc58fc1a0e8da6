"""Node objects for a policy carry the device plugin's resources and GFD's labels."""

from __future__ import annotations

from gpucarve.config.policy_build import load_policy
from gpucarve.devcluster.nodes import KWOK_ANNOTATION, node_manifests
from tests.paths import BUILTIN

EXAMPLE = BUILTIN / "three-teams.yaml"


def test_every_slice_of_the_policy_is_advertised_once() -> None:
    policy = load_policy(EXAMPLE).policy
    manifests = node_manifests(policy)
    assert len(manifests) == sum(p.nodes for p in policy.pools)
    totals: dict[str, int] = {}
    for m in manifests:
        assert m["status"]["capacity"] == m["status"]["allocatable"]
        assert m["metadata"]["annotations"] == {KWOK_ANNOTATION: "fake"}
        for name, value in m["status"]["allocatable"].items():
            if name.startswith("nvidia.com/"):
                totals[name] = totals.get(name, 0) + int(value)
    # 4 × 8 H100 whole; 16 A100 each 3g.40gb + 2g.20gb + 2 × 1g.10gb; 6 L40S × 8 replicas
    assert totals == {
        "nvidia.com/gpu": 32,
        "nvidia.com/mig-3g.40gb": 16,
        "nvidia.com/mig-2g.20gb": 16,
        "nvidia.com/mig-1g.10gb": 32,
        "nvidia.com/gpu.shared": 48,
    }
    dev = next(m for m in manifests if m["metadata"]["name"] == "dev-0")
    assert dev["metadata"]["labels"]["nvidia.com/gpu.replicas"] == "8"
    assert dev["status"]["allocatable"]["cpu"] == "32000m"
    training = next(m for m in manifests if m["metadata"]["name"] == "training-0")
    assert training["spec"]["taints"] == [
        {"key": "nvidia.com/gpu", "effect": "NoSchedule", "value": "present"}
    ]
