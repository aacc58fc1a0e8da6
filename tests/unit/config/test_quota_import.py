"""ResourceQuotas and PriorityClasses back into queue and priority blocks."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpucarve.config.policy_build import load_policy
from gpucarve.config.quota_import import import_quotas
from gpucarve.core.policy import Policy
from gpucarve.core.problems import InvalidInput
from gpucarve.render.namespaces import namespace_objects
from tests.paths import BUILTIN

POLICY = load_policy(BUILTIN / "three-teams.yaml").policy


def test_render_then_import_gives_each_namespace_its_queues_ceiling(tmp_path: Path) -> None:
    path = tmp_path / "objs.yaml"
    path.write_text("".join("---\n" + yaml.safe_dump(o) for o in namespace_objects(POLICY)))
    blocks = import_quotas(path, POLICY)
    queues = {q["name"]: q for q in blocks["queues"]}
    assert set(queues) == {"research", "production", "serving", "data-science", "notebooks"}
    assert queues["research"]["quota"]["h100-full"] == {"nominal": 32}
    assert queues["research"]["namespaces"] == ["research"]
    classes = {c["name"]: c for c in blocks["priorityClasses"]}
    assert classes["production-critical"]["preemptible"] is False
    assert classes["training"]["default"] is True
    assert classes["training"]["value"] == 1000


def test_a_kubectl_list_is_read_and_an_ambiguous_resource_refused(tmp_path: Path) -> None:
    doc = {"apiVersion": "v1", "kind": "List", "items": [
        {"kind": "ResourceQuota", "metadata": {"name": "q", "namespace": "team-a"},
         "spec": {"hard": {"requests.nvidia.com/gpu": "4", "limits.cpu": "8"}}},
        {"kind": "ResourceQuota", "metadata": {"name": "q", "namespace": "team-b"},
         "spec": {"hard": {"nvidia.com/mig-9g.90gb": "2"}}},
    ]}  # fmt: skip
    path = tmp_path / "list.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(InvalidInput) as info:
        import_quotas(path, POLICY)
    (p,) = info.value.problems
    assert p.code == "no-single-flavor" and "team-b" in p.location
    doc["items"].pop()
    path.write_text(yaml.safe_dump(doc))
    (q,) = import_quotas(path, POLICY)["queues"]
    assert q == {"name": "team-a", "namespaces": ["team-a"], "quota": {"h100-full": {"nominal": 4}}}


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("kind: List\nitems: 5\n", "not-a-list"),
        ("kind: ResourceQuota\nmetadata: [1]\n", "bad-object"),
        ("kind: ResourceQuota\nmetadata: {namespace: a}\nspec: [1]\n", "bad-object"),
        ("kind: ResourceQuota\nmetadata: {namespace: a}\nspec: {hard: [1]}\n", "bad-object"),
        ("kind: PriorityClass\nmetadata: {name: p, labels: [1]}\nvalue: 1\n", "bad-object"),
        ("kind: PriorityClass\nmetadata: {name: p}\nvalue: high\n", "bad-priority-class"),
        ("kind: PriorityClass\nmetadata: {name: p}\nvalue: 1e30\n", "bad-priority-class"),
        ("kind: PriorityClass\nmetadata: {name: p}\nvalue: .nan\n", "bad-priority-class"),
        ("kind: ResourceQuota\nmetadata: {namespace: ''}\nspec: {hard: {}}\n", "bad-object"),
        # 2Ki is 2,048 GPUs: more than the policy's 32 H100s
        ("kind: ResourceQuota\nmetadata: {namespace: a}\n"
         "spec: {hard: {requests.nvidia.com/gpu: 2Ki}}\n", "quota-exceeds-capacity"),
    ],
)  # fmt: skip
def test_what_the_policy_would_refuse_is_refused_here(tmp_path: Path, text: str, code: str) -> None:
    path = tmp_path / "objs.yaml"
    path.write_text(text)
    with pytest.raises(InvalidInput) as err:
        import_quotas(path, POLICY)
    (problem,) = err.value.problems
    assert problem.code == code and problem.fix, problem


def test_dra_quotas_by_device_class_come_back_as_the_flavor_of_that_class(tmp_path: Path) -> None:
    from tests.paths import EXAMPLES

    dra = load_policy(EXAMPLES / "dra" / "policy.yaml").policy
    path = tmp_path / "objs.yaml"
    path.write_text("".join("---\n" + yaml.safe_dump(o) for o in namespace_objects(dra)))
    with pytest.raises(InvalidInput) as err:
        import_quotas(path, dra)  # gpu.nvidia.com devices: H100s and shared L40S alike
    said = " ".join(f"{p.location} {p.message} {p.fix}" for p in err.value.problems)
    assert "gpu.nvidia.com.deviceclass.resource.k8s.io/devices" in said
    assert "split the quota by hand among h100-dra-full, l40s-dra-shared" in said
    # a class that one flavor alone serves becomes that flavor's quota
    one = dra_policy_with_one_mig_profile(tmp_path)
    hard = {"mig.nvidia.com.deviceclass.resource.k8s.io/devices": "2"}
    quota = {"kind": "ResourceQuota", "metadata": {"namespace": "research", "name": "q"},
             "spec": {"hard": hard}}  # fmt: skip
    path.write_text(yaml.safe_dump(quota))
    (queue,) = import_quotas(path, one)["queues"]
    assert queue["quota"] == {"a100-dra-mig-3g.40gb": {"nominal": 2}}


def dra_policy_with_one_mig_profile(tmp_path: Path) -> Policy:
    from tests.paths import EXAMPLES

    doc = yaml.safe_load((EXAMPLES / "dra" / "policy.yaml").read_text())
    for pool in doc["pools"]:
        if pool["name"] == "a100-mig":
            pool["mig"]["layout"] = {"3g.40gb": 2}
    path = tmp_path / "one-profile.yaml"
    path.write_text(yaml.safe_dump(doc))
    loaded = load_policy(path).policy
    assert loaded is not None
    return loaded
