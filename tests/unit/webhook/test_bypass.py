"""The ways around the queue, closed at admission (webhook/bypass.py), without a server; the
real API server's side is tests/integration/test_webhook.py."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest

from gpucarve.config.policy_build import load_policy
from gpucarve.core.problems import Severity
from gpucarve.core.vocabulary import QUEUE_LABELS, SCHEDULER_OWNED_ANNOTATIONS
from gpucarve.webhook.admission import mutate, pod_problems, pod_review
from gpucarve.webhook.bypass import owned_changes
from tests.json_patch import apply_patch
from tests.paths import BUILTIN

POLICY = load_policy(BUILTIN / "three-teams.yaml").policy
HELPERS = Path(__file__).resolve().parents[3] / "deploy/helm/gpucarve/templates/_helpers.tpl"


def _pod(ns: str = "research", limits: dict[str, str] | None = None, **spec: Any) -> Any:
    container: dict[str, Any] = {"name": "main"}
    if limits is not None:
        container["resources"] = {"limits": limits}
    return {
        "metadata": {"namespace": ns, "name": "p"},
        "spec": {"containers": [container], **spec},
    }


def _codes(pod: Any, mutated: bool = False) -> list[str]:
    """The validating webhook's codes for `pod` as it gets there: after the mutating webhook
    (`mutated=False`: as written, as if the mutating webhook had not run)."""
    if not mutated:
        pod = apply_patch(pod, mutate(POLICY, pod, "gpucarve", "UID").patch)
    return sorted(p.code for p in pod_problems(POLICY, pod, "gpucarve"))


GPU = {"nvidia.com/gpu": "1"}


@pytest.mark.parametrize(
    ("pod", "code"),
    [
        (_pod(limits=GPU, nodeName="h100-0"), "node-name-set"),
        (_pod(limits={"cpu": "1"}, nodeName="h100-0", schedulerName="gpucarve"), "node-name-set"),
        (_pod(limits=GPU, schedulerName="volcano"), "other-scheduler"),
        (
            _pod(limits=GPU, volumes=[{"name": "d", "hostPath": {"path": "/dev/nvidia0"}}]),
            "device-host-path",
        ),
        (_pod(volumes=[{"name": "d", "hostPath": {"path": "/dev"}}]), "device-host-path"),
        # judged after normalisation, as the kubelet resolves them; the root holds /dev
        *[
            (_pod(volumes=[{"name": "d", "hostPath": {"path": p}}]), "device-host-path")
            for p in ("//dev", "/./dev", "/var/../dev/nvidia0", "/", "//", "/dev/./nvidiactl")
        ],
        # a device list as mounts (the toolkit's volume-mounts strategy), in any container
        *[
            (
                _pod(containers=[{"name": "m", "volumeMounts": [{"name": "v", "mountPath": p}]}]),
                "device-list-mount",
            )
            for p in (
                "/var/run/nvidia-container-devices/all",
                "//run/nvidia-container-devices",
                "/var/run/./nvidia-container-devices/0",
            )
        ],
        (
            _pod(
                ephemeralContainers=[
                    {
                        "name": "dbg",
                        "volumeMounts": [
                            {"name": "v", "mountPath": "/var/run/nvidia-container-devices/all"}
                        ],
                    }
                ]
            ),
            "device-list-mount",
        ),
    ],
)
def test_each_way_past_the_scheduler_is_refused(pod: Any, code: str) -> None:
    assert code in _codes(pod)
    elsewhere = copy.deepcopy(pod)
    elsewhere["metadata"]["namespace"] = "elsewhere"
    assert pod_problems(POLICY, elsewhere, "gpucarve") == []  # only governed namespaces


def test_a_privileged_container_is_refused_even_without_a_gpu_request() -> None:
    p = _pod()
    p["spec"]["initContainers"] = [{"name": "i", "securityContext": {"privileged": True}}]
    assert _codes(p) == ["privileged"]
    p["spec"]["initContainers"][0]["securityContext"]["privileged"] = False
    assert _codes(p) == []


def test_what_stays_allowed() -> None:
    # a CPU pod pinned to a node, the default scheduler's GPU pod (the webhook rewrites it),
    # a host path outside /dev
    assert _codes(_pod(limits={"cpu": "1"}, nodeName="cpu-0")) == []
    assert _codes(_pod(limits=GPU)) == []
    assert _codes(_pod(volumes=[{"name": "d", "hostPath": {"path": "/devices-data"}}])) == []
    mounts = [{"name": "v", "mountPath": "/var/run/nvidia-container-devices-cache"}]
    assert _codes(_pod(containers=[{"name": "m", "volumeMounts": mounts}])) == []


def test_env_from_in_a_container_without_a_gpu_is_neutralised() -> None:
    p = _pod()
    p["spec"]["containers"][0]["envFrom"] = [{"configMapRef": {"name": "settings"}}]
    assert _codes(p, mutated=True) == ["device-env-from"]  # had the mutating webhook not run
    m = mutate(POLICY, p, "gpucarve", "UID")
    after = apply_patch(p, m.patch)
    assert after["spec"]["containers"][0]["env"] == [
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}
    ]
    assert _codes(after, mutated=True) == []
    assert "NVIDIA_VISIBLE_DEVICES=void" in after["metadata"]["annotations"]["gpucarve.io/mutated"]
    # a container that sets it itself to something else is refused, as before
    p["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    assert "device-env-set-by-pod" in _codes(p)


def test_env_from_in_a_gpu_container_needs_a_prefix_that_cannot_name_the_variable() -> None:
    p = _pod(limits=GPU)
    c = p["spec"]["containers"][0]
    c["envFrom"] = [{"secretRef": {"name": "s"}}]
    assert _codes(p) == ["device-env-from"]
    c["envFrom"] = [{"secretRef": {"name": "s"}, "prefix": "NVIDIA_"}]
    assert _codes(p) == ["device-env-from"]
    c["envFrom"] = [{"secretRef": {"name": "s"}, "prefix": "APP_"}]
    assert _codes(p) == []


def test_a_fractions_config_map_comes_last() -> None:
    p = _pod()
    p["metadata"]["annotations"] = {"gpucarve.io/gpu-fraction": "250"}
    p["spec"]["containers"][0]["envFrom"] = [{"configMapRef": {"name": "settings"}}]
    after = apply_patch(p, mutate(POLICY, p, "gpucarve", "ABC").patch)
    refs = after["spec"]["containers"][0]["envFrom"]
    assert refs[-1] == {"configMapRef": {"name": "gpucarve-gpu-abc"}}
    assert "env" not in after["spec"]["containers"][0]  # its GPU comes through the ConfigMap
    assert _codes(after, mutated=True) == []
    after["spec"]["containers"][0]["envFrom"] = [*refs, {"configMapRef": {"name": "late"}}]
    assert _codes(after, mutated=True) == ["device-config-not-last"]


def test_a_fraction_may_name_only_a_device_config_map_of_gpucarves_shape() -> None:
    """A tenant's name (kube-root-ca.crt, say) would have the scheduler fail to write it and
    try again: the mutating webhook replaces it with one named from the admission request,
    and validation refuses any name not of that shape (each webhook call of one request has a
    uid of its own: the shape, not the name, is what validation can know)."""
    uid = "0f8e2c1a-1111-4222-8333-444455556666"
    name = f"gpucarve-gpu-{uid}"
    p = _pod()
    p["metadata"]["annotations"] = {"gpucarve.io/gpu-fraction": "250",
                                    "gpucarve.io/device-config": "kube-root-ca.crt"}  # fmt: skip
    after = apply_patch(p, mutate(POLICY, p, "gpucarve", uid).patch)
    assert after["metadata"]["annotations"]["gpucarve.io/device-config"] == name
    assert after["spec"]["containers"][0]["envFrom"] == [{"configMapRef": {"name": name}}]
    assert pod_problems(POLICY, after) == []
    # reinvoked in the same admission (another uid): kept as it is
    other = "0f8e2c1a-1111-4222-8333-777777777777"
    again = apply_patch(after, mutate(POLICY, after, "gpucarve", other).patch)
    assert again["metadata"]["annotations"]["gpucarve.io/device-config"] == name
    # validation of a pod that names another: refused
    assert "scheduler-owned" in [x.code for x in pod_problems(POLICY, p)]


def test_scheduler_owned_annotations_are_removed_at_creation_and_frozen_after() -> None:
    p = _pod(limits=GPU)
    p["metadata"]["annotations"] = {
        "gpucarve.io/device-config": "kube-root-ca.crt",
        "gpucarve.io/assignment": '{"slices":["h100-0/gpu0"]}',
        "team": "x",
    }
    assert _codes(p, mutated=True) == ["scheduler-owned", "scheduler-owned"]
    after = apply_patch(p, mutate(POLICY, p, "gpucarve", "U").patch)
    assert set(after["metadata"]["annotations"]) == {"team", "gpucarve.io/mutated"}
    assert _codes(after) == []
    # an update that sets or changes one is refused; other changes are not
    changed = copy.deepcopy(after)
    changed["metadata"]["annotations"]["gpucarve.io/assignment"] = "{}"
    (problem,) = owned_changes(after, changed)
    assert problem.code == "scheduler-owned" and "assignment" in str(problem.location)
    relabelled = copy.deepcopy(after)
    relabelled["metadata"]["labels"] = {"x": "y"}
    assert owned_changes(after, relabelled) == []


def test_the_charts_update_condition_names_the_same_annotations_and_queue_labels() -> None:
    text = HELPERS.read_text()
    block = text.split('define "gpucarve.ownedAnnotationsChanged"')[1].split("{{- end")[0]
    listed = re.findall(r"'(gpucarve\.io/[a-z-]+)'", block.split("].exists")[0])
    assert tuple(listed) == SCHEDULER_OWNED_ANNOTATIONS
    block = text.split('define "gpucarve.boundQueueChanged"')[1].split("{{- end")[0]
    listed = re.findall(r"'([a-z0-9.-]+/[a-z-]+)'", block.split("].exists")[0])
    assert tuple(listed) == QUEUE_LABELS


def test_the_queue_label_of_a_bound_pod_is_frozen() -> None:
    pending = _pod(limits=GPU)
    pending["metadata"]["labels"] = {"gpucarve.io/queue": "research"}
    moved = copy.deepcopy(pending)
    moved["metadata"]["labels"]["gpucarve.io/queue"] = "production"
    assert owned_changes(pending, moved) == []  # not bound yet: validation judges it anew
    bound = copy.deepcopy(pending)
    bound["spec"]["nodeName"] = "training-0"
    moved["spec"]["nodeName"] = "training-0"
    (p,) = owned_changes(bound, moved)
    assert p.code == "queue-of-bound-pod" and "gpucarve.io/queue" in p.location
    kueue = copy.deepcopy(bound)
    kueue["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "production"
    (p,) = owned_changes(bound, kueue)
    assert "kueue.x-k8s.io/queue-name" in p.location


def _problems(pod: Any) -> list[Any]:
    return pod_problems(POLICY, pod, "gpucarve")


def test_what_can_never_run_is_refused_with_what_to_change() -> None:
    # research has no quota for the 3g.40gb MIG flavor
    (p,) = _problems(_pod(limits={"nvidia.com/mig-3g.40gb": "1"}))
    assert p.code == "can-never-fit" and "no quota for a flavor" in p.message
    # a thousand GPUs, and sixteen in an init container: no node has more than eight
    (p,) = _problems(_pod(limits={"nvidia.com/gpu": "1000"}))
    assert p.code == "can-never-fit" and "no node has more than 8" in p.message
    init = _pod(limits=GPU)
    init["spec"]["initContainers"] = [
        {"name": "warm", "resources": {"limits": {"nvidia.com/gpu": "16"}}}
    ]
    (p,) = _problems(init)
    assert "needs 16 h100-full" in p.message


def test_a_selector_no_node_of_the_policy_matches_is_admitted_with_a_warning() -> None:
    """A node may carry the catalog's name, or a label the policy does not know, so these are
    no certain refusal: admitted, with the nearest label GFD publishes in a warning that
    kubectl prints."""
    # the guides' product name; GPU Feature Discovery publishes NVIDIA-H100-80GB-HBM3
    wrong = _pod(limits=GPU, nodeSelector={"nvidia.com/gpu.product": "H100-SXM5-80GB"})
    assert _problems(wrong) == []
    (p,) = pod_review(POLICY, wrong, "gpucarve")
    assert (p.code, p.severity) == ("may-never-fit", Severity.WARNING), p
    assert "did you mean nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3?" in p.message
    right = _pod(limits=GPU, nodeSelector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})
    assert pod_review(POLICY, right, "gpucarve") == []
    typo = _pod(limits=GPU, nodeSelector={"nvidia.com/gpu.prodcut": "NVIDIA-H100-80GB-HBM3"})
    assert _problems(typo) == []
    (p,) = pod_review(POLICY, typo, "gpucarve")
    assert "did you mean nvidia.com/gpu.product?" in p.message
    # a name no node of the pool may carry is certain
    (p,) = _problems(_pod(limits=GPU, nodeSelector={"nvidia.com/gpu.product": "Tesla-T4"}))
    assert p.code == "can-never-fit"


def test_every_container_that_gets_no_gpu_is_told_so_whatever_its_image_sets() -> None:
    """A CUDA base image sets NVIDIA_VISIBLE_DEVICES=all, which the NVIDIA runtime honours
    (`runtimeClassName: nvidia` or the runtime by default): every container given no GPU gets
    an explicit `void`; a container given GPUs (device plugin, a claim, a fraction's) does not."""
    p = _pod(limits=GPU, runtimeClassName="nvidia")
    p["spec"]["containers"].append({"name": "sidecar", "image": "nvidia/cuda"})
    p["spec"]["initContainers"] = [{"name": "fetch", "image": "nvidia/cuda"}]
    after = apply_patch(p, mutate(POLICY, p, "gpucarve", "UID").patch)
    void = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]
    assert "env" not in after["spec"]["containers"][0]
    assert after["spec"]["containers"][1]["env"] == void
    assert after["spec"]["initContainers"][0]["env"] == void
    assert _codes(after, mutated=True) == []
    assert _codes(p, mutated=True) == ["device-env-unset", "device-env-unset"]
    claims = _pod(resourceClaims=[{"name": "g", "resourceClaimTemplateName": "t"}])
    claims["spec"]["containers"][0]["resources"] = {"claims": [{"name": "g"}]}
    assert bypass_void(claims) == []  # the DRA driver's devices reach it


def bypass_void(pod: Any) -> list[tuple[str, int]]:
    from gpucarve.webhook.bypass import needs_void

    return needs_void(pod, False)


def test_cdi_annotations_and_debug_containers_are_held_to_the_same_rules() -> None:
    from gpucarve.webhook.admission import debug_problems, mutate_debug

    cdi = _pod(limits={"cpu": "1"})
    cdi["metadata"]["annotations"] = {"cdi.k8s.io/gpus": "nvidia.com/gpu=all"}
    assert "cdi-annotation" in _codes(cdi)
    running = _pod(limits={"cpu": "1"})
    debugged = copy.deepcopy(running)
    debugged["spec"]["ephemeralContainers"] = [
        {"name": "root", "image": "busybox", "securityContext": {"privileged": True}},
        {"name": "settings", "image": "busybox",
         "envFrom": [{"configMapRef": {"name": "anything"}}]},
    ]  # fmt: skip
    codes = sorted(p.code for p in debug_problems(POLICY, debugged, running))
    assert codes == ["device-env-from", "device-env-unset", "privileged"], codes
    # the mutating webhook gives the added debug containers the explicit `void`
    m = mutate_debug(POLICY, debugged, running)
    fixed = apply_patch(debugged, m.patch)
    fixed["spec"]["ephemeralContainers"] = fixed["spec"]["ephemeralContainers"][1:]
    assert debug_problems(POLICY, fixed, running) == []
    # what was there before is not judged again
    assert debug_problems(POLICY, fixed, fixed) == []


def test_only_the_scheduler_and_the_control_plane_touch_a_device_config_map() -> None:
    from gpucarve.webhook.bypass import device_config_problems

    cm = {"metadata": {"name": "gpucarve-gpu-x", "namespace": "notebooks",
                       "labels": {"app.kubernetes.io/managed-by": "gpucarve"}}}  # fmt: skip
    writers = frozenset({"system:serviceaccount:gpucarve-system:gpucarve"})

    def review(user: str, op: str = "UPDATE", groups: tuple[str, ...] = ()) -> list[str]:
        req = {"operation": op, "object": cm, "oldObject": cm,
               "userInfo": {"username": user, "groups": list(groups)}}  # fmt: skip
        return [p.code for p in device_config_problems(req, writers)]

    tenant = "system:serviceaccount:notebooks:default"
    assert review(tenant) == ["device-config-owned"]
    assert review(tenant, "DELETE") == ["device-config-owned"]
    assert review(tenant, "CREATE", ("system:authenticated",)) == ["device-config-owned"]
    assert review("system:serviceaccount:gpucarve-system:gpucarve") == []
    assert review("system:serviceaccount:kube-system:generic-garbage-collector", "DELETE") == []
    assert review("system:kube-controller-manager", "DELETE") == []
    assert review("alice", "DELETE", ("system:masters",)) == []
