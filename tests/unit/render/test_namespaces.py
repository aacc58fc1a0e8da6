"""ResourceQuota and LimitRange per governed namespace, sized from its queue."""

from __future__ import annotations

from gpucarve.config.policy_build import load_policy
from gpucarve.render.namespaces import namespace_objects, split_warnings
from tests.paths import BUILTIN, EXAMPLES

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
    # production's two namespaces share its ceiling: together they never exceed it
    objs = namespace_objects(POLICY, split=False)
    whole = {o["metadata"]["namespace"]: o["spec"]["hard"]
             for o in objs if o["kind"] == "ResourceQuota"}  # fmt: skip
    for key, total in whole["production"].items():
        assert int(quotas["production"][key]) + int(quotas["serving"][key]) == int(total), key
        assert int(quotas["production"][key]) - int(quotas["serving"][key]) in (0, 1), key
    assert whole["production"] == whole["serving"]
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


def test_every_gpu_resource_is_capped_in_every_namespace() -> None:
    resources = {f"requests.{f.resource_name}" for f in POLICY.flavors.values()}
    for ns, hard in _by("ResourceQuota").items():
        assert set(hard) == resources, ns
    # research has no quota for 3g.40gb or 1g.10gb: none may bypass gpucarve to get one
    research = _by("ResourceQuota")["research"]
    assert research["requests.nvidia.com/mig-3g.40gb"] == "0"
    assert research["requests.nvidia.com/mig-1g.10gb"] == "0"


def test_a_share_of_nothing_is_warned() -> None:
    from tests.unit.webhook.test_admission import load_policy_text

    many = ", ".join(f"team-{i}" for i in range(25))
    raw = (BUILTIN / "three-teams.yaml").read_text()
    raw = raw.replace("namespaces: [data-science, notebooks]", f"namespaces: [{many}]")
    warnings = split_warnings(load_policy_text(raw))
    assert any("namespace team-24 gets 0 of" in w for w in warnings), warnings
    assert split_warnings(POLICY) == []


def test_dra_devices_are_capped_by_device_class_and_never_as_an_extended_resource() -> None:
    dra = load_policy(EXAMPLES / "dra" / "policy.yaml").policy
    objs = namespace_objects(dra)
    hard = {o["metadata"]["namespace"]: o["spec"]["hard"]
            for o in objs if o["kind"] == "ResourceQuota"}  # fmt: skip
    research = hard["research"]
    # research: h100-dra-full 8 + 8 borrowed, l40s-dra-shared 8 (both gpu.nvidia.com devices)
    assert research["gpu.nvidia.com.deviceclass.resource.k8s.io/devices"] == "24"
    assert research["mig.nvidia.com.deviceclass.resource.k8s.io/devices"] == "2"
    assert research["requests.nvidia.com/gpu"] == "8"  # the device-plugin A100s
    keys = {k for h in hard.values() for k in h}
    assert not any(k.startswith("requests.") and "nvidia.com/" not in k for k in keys), keys
    assert "requests.gpu.nvidia.com" not in keys
    for o in objs:
        if o["kind"] == "LimitRange":
            assert all(k.startswith("nvidia.com/") for k in o["spec"]["limits"][0]["max"])
