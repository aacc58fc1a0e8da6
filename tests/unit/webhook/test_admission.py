"""The webhook's decisions without a server: which pods are touched, the patch, the
problems (the scheduler's own), and the Queue checks a schema cannot make."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpucarve.config.policy_build import load_policy
from gpucarve.core.policy import Policy
from gpucarve.core.vocabulary import DEVICE_CONFIG_ANNOTATION, FRACTION_ANNOTATION
from gpucarve.core.workload import Workload
from gpucarve.webhook.admission import (
    claim_problems,
    mutate,
    pod_problems,
    queue_problems,
    wants_gpu,
)
from tests.json_patch import apply_patch
from tests.paths import BUILTIN, EXAMPLES

POLICY = load_policy(BUILTIN / "three-teams.yaml").policy


def load_policy_text(raw: str) -> Policy:
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "p.yaml"
        path.write_text(raw)
        loaded = load_policy(path)
    assert loaded.policy is not None, loaded.problems
    return loaded.policy


def _workload(policy: Policy, pod: dict[str, Any]) -> Workload:
    from gpucarve.webhook.admission import _as_scheduled

    found = _as_scheduled(policy, pod).workload
    assert found is not None
    return found


def _pod(ns: str, limits: dict[str, str], **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"namespace": ns, "generateName": "job-", **meta},
        "spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]},
    }


def test_only_gpu_pods_of_governed_namespaces_are_changed() -> None:
    assert not wants_gpu(_pod("research", {"cpu": "1"}))
    # a CPU pod is only told it gets no GPU (its image may say otherwise): no scheduler, no
    # queue, no requests
    cpu = apply_patch(_pod("research", {"cpu": "1"}), mutate(POLICY, _pod("research", {
        "cpu": "1"}), "gpucarve").patch)  # fmt: skip
    assert cpu["spec"]["containers"][0]["env"] == [
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]  # fmt: skip
    assert "schedulerName" not in cpu["spec"] and "labels" not in cpu["metadata"]
    assert mutate(POLICY, _pod("kube-system", {"nvidia.com/gpu": "1"}), "gpucarve").patch == []
    other = _pod("research", {"nvidia.com/gpu": "1"})
    other["spec"]["schedulerName"] = "volcano"
    assert all(op["path"] != "/spec/schedulerName" for op in mutate(POLICY, other, "g").patch)


def test_the_patch_sets_scheduler_queue_and_requests_and_lists_them() -> None:
    p = _pod("research", {"nvidia.com/gpu": "2"}, labels={"app": "x"})
    m = mutate(POLICY, p, "gpucarve")
    ops = {op["path"]: op["value"] for op in m.patch}
    assert ops["/spec/schedulerName"] == "gpucarve"
    assert ops["/metadata/labels/gpucarve.io~1queue"] == "research"
    assert ops["/spec/containers/0/resources/requests"] == {}
    assert ops["/spec/containers/0/resources/requests/nvidia.com~1gpu"] == "2"
    assert json.loads(ops["/metadata/annotations/gpucarve.io~1mutated"]) == m.changes
    assert "/metadata/labels" not in ops  # the pod has labels: only the key is added
    assert ops["/spec/nodeSelector"] == {}
    assert ops["/spec/nodeSelector/gpucarve.io~1gpu-mode"] == "exclusive"
    assert len(m.changes) == 4


def _selector(pod: dict[str, Any]) -> str | None:
    ops = {op["path"]: op["value"] for op in mutate(POLICY, pod, "gpucarve").patch}
    return ops.get("/spec/nodeSelector/gpucarve.io~1gpu-mode")


def test_the_mode_selector_is_the_one_mode_the_request_implies() -> None:
    assert _selector(_pod("research", {"nvidia.com/gpu": "1"})) == "exclusive"
    assert _selector(_pod("production", {"nvidia.com/mig-1g.10gb": "1"})) == "mig"
    assert _selector(_pod("data-science", {"nvidia.com/gpu.shared": "1"})) == "time-slicing"
    fraction = _pod("data-science", {"cpu": "1"},
                    annotations={"gpucarve.io/gpu-fraction": "500"})  # fmt: skip
    assert _selector(fraction) == "time-slicing"  # the only pool with shared slices
    # a profile no pool has: no mode (validation refuses the pod)
    assert _selector(_pod("production", {"nvidia.com/mig-7g.99gb": "1"})) is None
    # the pod's own choice is kept, and an existing selector gets only the key
    own = _pod("research", {"nvidia.com/gpu": "1"})
    own["spec"]["nodeSelector"] = {"gpucarve.io/gpu-mode": "mig"}
    assert _selector(own) is None
    zoned = _pod("research", {"nvidia.com/gpu": "1"})
    zoned["spec"]["nodeSelector"] = {"zone": "a"}
    paths = [op["path"] for op in mutate(POLICY, zoned, "gpucarve").patch]
    assert "/spec/nodeSelector" not in paths
    assert "/spec/nodeSelector/gpucarve.io~1gpu-mode" in paths


def test_two_modes_serve_shared_requests_so_no_selector_narrows_them() -> None:
    from gpucarve.kube.view.gpu_mode import implied_mode

    raw = (BUILTIN / "three-teams.yaml").read_text()
    mps = ("  - name: inference\n    gpuModel: L4\n    nodes: 2\n    gpusPerNode: 1\n"
           "    sharing: mps\n    replicas: 4\n\n")  # fmt: skip
    raw = raw.replace("cohorts:", mps + "cohorts:", 1)
    policy = load_policy_text(raw)
    (ps,) = _workload(policy, _pod("research", {"nvidia.com/gpu.shared": "1"})).pod_sets
    assert implied_mode(policy, [ps.gpu]) is None
    (ps,) = _workload(POLICY, _pod("research", {"nvidia.com/gpu.shared": "1"})).pod_sets
    assert implied_mode(POLICY, [ps.gpu]) == "time-slicing"


def test_nodes_get_their_pools_mode_label_only_when_missing_or_wrong() -> None:
    from gpucarve.kube.view.gpu_mode import labels_to_write

    def node(name: str, **labels: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "labels": labels}}

    nodes = [
        node("a", **{"gpucarve.io/pool": "training"}),
        node("b", **{"gpucarve.io/pool": "training", "gpucarve.io/gpu-mode": "exclusive"}),
        node("c", **{"gpucarve.io/pool": "dev", "gpucarve.io/gpu-mode": "exclusive"}),
        node("d", **{"gpucarve.io/pool": "nowhere"}),
        node("e"),
    ]
    assert labels_to_write(POLICY, nodes) == {"a": "exclusive", "c": "time-slicing"}


def test_problems_are_the_schedulers_and_none_for_good_pods() -> None:
    assert pod_problems(POLICY, _pod("research", {"nvidia.com/gpu": "8"})) == []
    bad = _pod("research", {"nvidia.com/gpu": "8"}, labels={"gpucarve.io/queue": "production"})
    (p,) = pod_problems(POLICY, bad)
    assert p.code == "queue-not-for-namespace"
    assert pod_problems(POLICY, _pod("elsewhere", {"nvidia.com/gpu": "8"})) == []


def test_cohort_checks_beyond_the_schema() -> None:
    from gpucarve.webhook.admission import cohort_problems

    tree = load_policy(EXAMPLES / "departments" / "policy.yaml").policy
    ok = {"metadata": {"name": "ml"}, "spec": {"parent": "company"}}
    assert cohort_problems(tree, ok) == []
    bad = {"metadata": {"name": "ml"},
           "spec": {"parent": "nowhere", "quota": {"tpu-v5": {"nominal": 1},
                                                   "h100-full": {"nominal": 999}}}}  # fmt: skip
    codes = sorted(p.code for p in cohort_problems(tree, bad))
    assert codes == ["quota-exceeds-capacity", "unknown-cohort", "unknown-flavor"]
    # the root made a child of its own child: the loop is named
    loop = {"metadata": {"name": "company"}, "spec": {"parent": "ml"}}
    (p,) = cohort_problems(tree, loop)
    assert p.code == "cohort-cycle" and "company → ml → company" in p.message


def test_queue_checks_beyond_the_schema() -> None:
    q = {"metadata": {"name": "research"},
         "spec": {"cohort": "nowhere", "quota": {"h100-full": {"nominal": 999},
                                                 "tpu-v5": {"nominal": 1}}}}  # fmt: skip
    codes = sorted(p.code for p in queue_problems(POLICY, q))
    assert codes == ["quota-exceeds-capacity", "unknown-cohort", "unknown-flavor"]
    ok = {"metadata": {"name": "research"},
          "spec": {"cohort": "company", "quota": {"h100-full": {"nominal": 16}}}}  # fmt: skip
    assert queue_problems(POLICY, ok) == []
    # a negative or non-numeric amount is refused by the webhook, not left to the schema
    bad = {"metadata": {"name": "research"}, "spec": {"quota": {
        "h100-full": {"nominal": -4, "borrowingLimit": "lots", "lendingLimit": True}}}}  # fmt: skip
    codes = sorted(p.code for p in queue_problems(POLICY, bad))
    assert codes == ["negative-quota", "not-a-number", "not-a-number"], codes


def test_pod_group_queue_and_priority_are_the_namespaces() -> None:
    from gpucarve.webhook.admission import pod_group_problems

    def group(ns: str, **spec: Any) -> dict[str, Any]:
        return {"metadata": {"name": "g", "namespace": ns}, "spec": {"minMember": 2, **spec}}

    assert pod_group_problems(POLICY, group("research")) == []
    assert pod_group_problems(POLICY, group("elsewhere", queue="production")) == []
    (p,) = pod_group_problems(POLICY, group("research", queue="production"))
    assert p.code == "queue-not-for-namespace"
    (p,) = pod_group_problems(POLICY, group("research", priorityClassName="production-critical"))
    assert p.code == "priority-class-not-allowed"


def test_a_container_naming_its_own_devices_is_refused_in_governed_namespaces() -> None:
    from gpucarve.webhook.admission import device_env_problems

    p = _pod("research", {"cpu": "1"})
    p["spec"]["initContainers"] = [
        {"name": "warm", "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "0,1"}]}
    ]
    p["spec"]["ephemeralContainers"] = [
        {"name": "dbg", "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}
    ]
    p["spec"]["containers"][0]["env"] = [{"name": "CUDA_VISIBLE_DEVICES", "value": "0"}]
    p = apply_patch(p, mutate(POLICY, p, "gpucarve", "UID").patch)  # as validation sees it
    where = sorted(str(prob.location) for prob in pod_problems(POLICY, p))
    assert len(where) == 2, where  # CUDA_VISIBLE_DEVICES only narrows what it was given
    assert "ephemeralContainers" in where[0] and "initContainers" in where[1], where
    assert all(prob.code == "device-env-set-by-pod" for prob in device_env_problems(p))
    elsewhere = {**p, "metadata": {**p["metadata"], "namespace": "elsewhere"}}
    assert pod_problems(POLICY, elsewhere) == []


def test_pods_that_claim_devices_are_gpucarves_where_the_policy_has_dra_pools() -> None:
    from tests.paths import EXAMPLES

    dra = load_policy(EXAMPLES / "dra" / "policy.yaml").policy
    claiming = _pod("research", {})
    claiming["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "t"}]
    patch = {op["path"]: op.get("value") for op in mutate(dra, claiming, "gpucarve").patch}
    assert patch["/spec/schedulerName"] == "gpucarve"
    # naming another scheduler is a way around the queue, refused as for device-plugin pods
    elsewhere = json.loads(json.dumps(claiming))
    elsewhere["spec"]["schedulerName"] = "my-scheduler"
    assert pod_problems(dra, elsewhere) != []
    # without DRA pools, claims are another driver's business: left alone
    plain = {op["path"] for op in mutate(POLICY, claiming, "gpucarve").patch}
    assert "/spec/schedulerName" not in plain


@pytest.mark.parametrize(
    "ref", [{"resourceClaimTemplateName": "t"}, {"resourceClaimName": "shared"}]
)
def test_a_pod_that_claims_dra_devices_passes_both_webhooks_as_the_api_server_calls_them(
    ref: dict[str, str],
) -> None:
    """The API server calls the mutating webhook with a review uid, then the validating one on
    the mutated pod: a DRA pod gets its GPUs from the DRA driver, so no device ConfigMap is
    given to it (which validation would then refuse as set by gpucarve only)."""
    from tests.paths import EXAMPLES

    dra = load_policy(EXAMPLES / "dra" / "policy.yaml").policy
    claiming = _pod("research", {})
    claiming["spec"]["resourceClaims"] = [{"name": "gpu", **ref}]
    claiming["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    m = mutate(dra, claiming, "gpucarve", review_uid="0a1b2c")
    mutated = apply_patch(claiming, m.patch)
    assert DEVICE_CONFIG_ANNOTATION not in mutated["metadata"].get("annotations", {})
    assert all("envFrom" not in c for c in mutated["spec"]["containers"])
    assert pod_problems(dra, mutated) == []
    # a fraction still gets its device ConfigMap, and passes too
    fraction = _pod("notebooks", {}, annotations={FRACTION_ANNOTATION: "500"})
    given = apply_patch(fraction, mutate(POLICY, fraction, "gpucarve", review_uid="9f").patch)
    assert given["metadata"]["annotations"][DEVICE_CONFIG_ANNOTATION] == "gpucarve-gpu-9f"
    assert pod_problems(POLICY, given) == []


def _claim(requests: list[dict[str, Any]], ns: str = "research") -> dict[str, Any]:
    return {"metadata": {"name": "c", "namespace": ns}, "spec": {"devices": {"requests": requests}}}


def _exactly(cls: str, count: int = 1, *selectors: str) -> dict[str, Any]:
    sel = [{"cel": {"expression": e}} for e in selectors]
    return {"name": "g", "exactly": {"deviceClassName": cls, "count": count, "selectors": sel}}


def test_a_gpu_claim_that_could_never_be_allocated_is_refused_with_its_field() -> None:
    dra = load_policy(EXAMPLES / "dra" / "policy.yaml").policy
    b200 = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA B200"'
    (p,) = claim_problems(dra, _claim([_exactly("gpu.nvidia.com", 1, b200)]), template=False)
    assert p.code == "no-device-matches" and "NVIDIA B200" in p.message
    assert p.path == ("c", "spec", "devices", "requests", 0, "exactly", "selectors")
    # more GPUs than any node of a DRA pool has
    (p,) = claim_problems(dra, _claim([_exactly("gpu.nvidia.com", 16)]), template=False)
    assert p.code == "can-never-fit" and "no node has more than 8" in p.message
    # a template's claims are judged the same way, at spec.spec
    mig = 'device.attributes["gpu.nvidia.com"].profile == "7g.99gb"'
    template = {"metadata": {"name": "t", "namespace": "research"},
                "spec": {"spec": _claim([_exactly("mig.nvidia.com", 1, mig)])["spec"]}}  # fmt: skip
    (p,) = claim_problems(dra, template, template=True)
    assert p.path[:4] == ("t", "spec", "spec", "devices") and "7g.99gb" in p.message
    # alternatives gpucarve does not choose among are refused with the way to ask
    first = {"name": "g", "firstAvailable": [{"name": "a", "deviceClassName": "gpu.nvidia.com"}]}
    (p,) = claim_problems(dra, _claim([first]), template=False)
    assert p.code == "claim-unsupported" and "exactly" in p.fix
    # what can run passes; so do claims of other drivers, of ungoverned namespaces, and
    # claims where the policy has no DRA pool
    assert claim_problems(dra, _claim([_exactly("gpu.nvidia.com", 4)]), template=False) == []
    assert claim_problems(dra, _claim([_exactly("nic.example.com", 16)]), template=False) == []
    wide = _claim([_exactly("gpu.nvidia.com", 16)], ns="kube-system")
    assert claim_problems(dra, wide, template=False) == []
    plain = _claim([_exactly("gpu.nvidia.com", 16)])
    assert claim_problems(POLICY, plain, template=False) == []


def _job(parallelism: int, limits: dict[str, str], completions: int | None = None) -> Any:
    spec: dict[str, Any] = {
        "parallelism": parallelism,
        "template": {"spec": {"restartPolicy": "Never", "containers": [
            {"name": "main", "image": "x", "resources": {"limits": limits}}]}},
    }  # fmt: skip
    if completions is not None:
        spec["completions"] = completions
    return {"metadata": {"name": "train", "namespace": "research"}, "spec": spec}


def test_a_job_whose_gang_or_pods_could_never_run_is_refused_once_when_written() -> None:
    from gpucarve.webhook.admission import job_problems

    # 40 pods of one H100 each, all at once: research can never hold more than 32
    (p,) = job_problems(POLICY, _job(40, {"nvidia.com/gpu": "1"}, completions=40))
    assert p.code == "can-never-fit" and p.path[1:] == ("spec", "parallelism"), p
    assert "its 40 pods run all at once" in p.message and "32" in p.message
    # the same pods one by one (a work queue) run in turn: admitted
    assert job_problems(POLICY, _job(40, {"nvidia.com/gpu": "1"})) == []
    assert job_problems(POLICY, _job(8, {"nvidia.com/gpu": "1"}, completions=8)) == []
    # a pod no node could hold: refused at the Job, at the template's path
    (p,) = job_problems(POLICY, _job(2, {"nvidia.com/gpu": "64"}, completions=2))
    assert p.code == "can-never-fit" and p.path[:3] == ("train", "spec", "template"), p
    # another namespace's Jobs, and Jobs without GPUs, are not gpucarve's
    elsewhere = _job(40, {"nvidia.com/gpu": "1"}, completions=40)
    elsewhere["metadata"]["namespace"] = "kube-system"
    assert job_problems(POLICY, elsewhere) == []
    assert job_problems(POLICY, _job(40, {"cpu": "1"}, completions=40)) == []
