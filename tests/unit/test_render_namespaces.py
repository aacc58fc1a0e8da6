"""ResourceQuota and LimitRange per governed namespace, sized from its queue."""

from __future__ import annotations

from gpucarve.config.policy_build import load_policy
from gpucarve.render.namespaces import namespace_objects
from tests.paths import BUILTIN

POLICY = load_policy(BUILTIN / "three-teams.yaml").policy


def _by(kind: str) -> dict[str, dict[str, str]]:
    out = {}
    for o in namespace_objects(POLICY):
        if o["kind"] == kind:
            spec = o["spec"]
            out[o["metadata"]["namespace"]] = spec["hard"] if kind == "ResourceQuota" else (
                spec["limits"][0]["max"])  # fmt: skip
    return out


def test_each_namespace_is_capped_at_its_queues_ceiling() -> None:
    quotas = _by("ResourceQuota")
    assert set(quotas) == {"research", "production", "serving", "data-science", "notebooks"}
    # research: h100-full nominal 16 + borrowing limit 16
    assert quotas["research"]["requests.nvidia.com/gpu"] == "32"
    # production lends but may not borrow h100 beyond its nominal... its namespaces share it
    assert quotas["production"] == quotas["serving"]
    # no limits. keys: extended resources take only requests.
    assert not any(k.startswith("limits.") for q in quotas.values() for k in q)


def test_one_container_is_capped_at_max_per_workload() -> None:
    ranges = _by("LimitRange")
    assert ranges == {"production": {"nvidia.com/mig-3g.40gb": "4"},
                      "serving": {"nvidia.com/mig-3g.40gb": "4"}}  # fmt: skip


def test_priority_classes_come_along() -> None:
    names = {
        o["metadata"]["name"] for o in namespace_objects(POLICY) if o["kind"] == "PriorityClass"
    }
    assert len(names) == len(POLICY.priority_classes)
