"""The admission webhook called by the real kube-apiserver over TLS (`gpucarve webhook serve`
as its own process, a certificate from `gpucarve.webhook.certs`): pods written for the default
scheduler are mutated and then bound; the attack matrix is denied with its message; with the
webhook down the documented failure policy holds; a certificate rotation while reviews flow
drops none."""

from __future__ import annotations

import json
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucarve.config.policy_build import load_policy
from gpucarve.devcluster.procs import free_port
from gpucarve.devcluster.stack import ADMIN_USER, LocalStack, find_binaries
from gpucarve.devcluster.webhook import configurations
from gpucarve.kube.api.client import Client
from gpucarve.kube.scheduler.loop import Scheduler, SchedulerConfig
from gpucarve.webhook.certs import issue
from tests.integration.api import Api, wait_for
from tests.integration.kube_pods import node_of, pod, pods_in
from tests.integration.stack_setup import populate, running
from tests.paths import BUILTIN

pytestmark = pytest.mark.integration
POLICY = BUILTIN / "three-teams.yaml"
GOVERNED = ["research", "production", "serving", "data-science", "notebooks"]


@dataclass
class Webhook:
    stack: LocalStack
    api: Api
    certs: Path
    port: int
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        args = [
            sys.executable,
            "-m",
            "gpucarve",
            "webhook",
            "serve",
            "--policy",
            str(POLICY),
            "--cert-dir",
            str(self.certs),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
        ]
        log = (self.certs.parent / "webhook.log").open("ab")
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
        ctx = ssl.create_default_context(cafile=str(self.certs / "ca.crt"))

        def up() -> bool:
            try:
                url = f"https://127.0.0.1:{self.port}/healthz"
                with urllib.request.urlopen(url, context=ctx, timeout=2) as r:
                    return r.status == 200
            except OSError:
                return False

        wait_for(up, what="the webhook serving")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(15)

    def log(self) -> str:
        return (self.certs.parent / "webhook.log").read_text(errors="replace")


def _configurations(port: int, ca: bytes) -> list[tuple[str, dict[str, Any]]]:
    """The configurations the stack (and the chart) install, pointed at this file's webhook."""
    return configurations(f"https://127.0.0.1:{port}", ca, GOVERNED)


@pytest.fixture(scope="module")
def webhook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Webhook]:
    work = tmp_path_factory.mktemp("webhook")
    policy = work / "policy.yaml"
    doc = yaml.safe_load(POLICY.read_text())
    doc.setdefault("scheduling", {})["minRuntimeSeconds"] = 0
    policy.write_text(yaml.safe_dump(doc))
    off = {
        "webhook": "this file runs the webhook itself, to stop it and rotate its "
        "certificate under load; its configurations are the stack's own"
    }
    with LocalStack(find_binaries(), work / "stack", off=off) as stack:
        api = Api(stack.server, stack.tokens[ADMIN_USER])
        populate(stack, api, policy, [*GOVERNED, "elsewhere"])
        issued = issue(["gpucarve-webhook"], ["127.0.0.1"], datetime.now(UTC))
        issued.write(work / "certs")
        hook = Webhook(stack, api, work / "certs", free_port())
        hook.start()
        for plural, body in _configurations(hook.port, issued.ca_pem):
            api.create(f"/apis/admissionregistration.k8s.io/v1/{plural}", body)
        try:
            yield hook
        finally:
            hook.stop()


def _create(api: Api, manifest: dict[str, Any], dry_run: bool = False) -> tuple[int, Any]:
    ns = manifest["metadata"]["namespace"]
    query = "?dryRun=All" if dry_run else ""
    return api.call("POST", f"/api/v1/namespaces/{ns}/pods{query}", manifest)


def _plain(ns: str, name: str, resource: str, count: int = 1) -> dict[str, Any]:
    """A pod as written for the default scheduler: no schedulerName, only limits."""
    p = pod(ns, name, resource, count)
    del p["spec"]["schedulerName"]
    del p["spec"]["containers"][0]["resources"]["requests"][resource]
    return p


def _wait_admitted(api: Api, manifest: dict[str, Any]) -> tuple[int, Any]:
    # the API server may need a moment before it calls a newly registered webhook
    def attempt() -> tuple[int, Any] | None:
        status, body = _create(api, manifest, dry_run=True)
        mutated = status == 201 and body["spec"].get("schedulerName") == "gpucarve"
        return (status, body) if mutated or status == 403 else None

    return wait_for(attempt, what="the webhook called")


def test_a_default_scheduler_pod_is_mutated_then_bound(webhook: Webhook) -> None:
    api, stack = webhook.api, webhook.stack
    manifest = _plain("research", "plain", "nvidia.com/gpu", 8)
    _wait_admitted(api, manifest)
    status, created = _create(api, manifest)
    assert status == 201, created
    spec, meta = created["spec"], created["metadata"]
    assert spec["schedulerName"] == "gpucarve"
    assert meta["labels"]["gpucarve.io/queue"] == "research"
    assert spec["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] == "8"
    assert "schedulerName=gpucarve" in meta["annotations"]["gpucarve.io/mutated"]
    # the seed's gpu-mode selector: the request implies the exclusive pool
    assert spec["nodeSelector"] == {"gpucarve.io/gpu-mode": "exclusive"}
    # nodes joined without the label: the scheduler writes it before it binds there
    nodes = api.get("/api/v1/nodes")["items"]
    for n in nodes:
        status, body = api.call("PATCH", f"/api/v1/nodes/{n['metadata']['name']}",
                                {"metadata": {"labels": {"gpucarve.io/gpu-mode": None}}},
                                "application/merge-patch+json")  # fmt: skip
        assert status == 200, body
    sched = Scheduler(Client.from_kubeconfig(stack.kubeconfig()),
                      load_policy(POLICY).policy, SchedulerConfig(interval_s=0.3))  # fmt: skip
    with running(sched):
        bound = wait_for(lambda: node_of(pods_in(api, "research")["plain"]), what="bound")
    modes = {n["metadata"]["name"]: n["metadata"]["labels"].get("gpucarve.io/gpu-mode")
             for n in api.get("/api/v1/nodes")["items"]}  # fmt: skip
    assert modes[bound] == "exclusive"
    pools = {n["metadata"]["name"]: n["metadata"]["labels"]["gpucarve.io/pool"] for n in nodes}
    expected = {"training": "exclusive", "production": "mig", "dev": "time-slicing"}
    assert modes == {name: expected[pools[name]] for name in modes}


def test_pods_outside_the_governed_namespaces_are_left_alone(webhook: Webhook) -> None:
    status, created = _create(webhook.api, _plain("elsewhere", "free", "nvidia.com/gpu"))
    assert status == 201, created
    assert created["spec"]["schedulerName"] == "default-scheduler"


def _init_hidden() -> dict[str, Any]:
    p = pod("serving", "hidden", "nvidia.com/mig-3g.40gb")
    init = {"name": "warm", "image": "fake",
            "resources": {"limits": {"nvidia.com/mig-3g.40gb": "5"}}}  # fmt: skip
    p["spec"]["initContainers"] = [init]
    return p


def _attacks() -> list[tuple[str, dict[str, Any], str]]:
    escape = pod("research", "escape", "nvidia.com/gpu", 8)
    escape["metadata"]["labels"]["gpucarve.io/queue"] = "production"
    priority = pod("research", "vip", "nvidia.com/gpu", priority_class="production-critical")
    fraction = pod("notebooks", "greedy", "nvidia.com/gpu.shared")
    fraction["metadata"]["annotations"] = {"gpucarve.io/gpu-fraction": "1500"}
    del fraction["spec"]["containers"][0]["resources"]
    profile = pod("serving", "odd", "nvidia.com/mig-4g.40gb")
    allgpus = pod("research", "sneaky", "cpu")
    allgpus["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    pinned = _plain("research", "pinned", "nvidia.com/gpu", 8)
    pinned["spec"]["nodeName"] = "training-0"
    elsewhere = pod("research", "volcanic", "nvidia.com/gpu", scheduler="volcano")
    privileged = pod("research", "root", "cpu")
    privileged["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    devices = pod("research", "devices", "cpu")
    devices["spec"]["volumes"] = [{"name": "dev", "hostPath": {"path": "/dev"}}]
    env_from = _plain("research", "settings", "nvidia.com/gpu")
    env_from["spec"]["containers"][0]["envFrom"] = [{"configMapRef": {"name": "settings"}}]
    # a product no node of research's pools may publish (a name a node may carry, the
    # catalog's say, is admitted with a warning: test_a_selector_the_cluster_could_satisfy…)
    guide = _plain("research", "guide", "nvidia.com/gpu")
    guide["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": "Tesla-T4"}
    thousand = _plain("research", "thousand", "nvidia.com/gpu", 1000)
    # /dev however it is spelt (the kubelet normalises), and the root that holds it
    spelt = []
    # (a path with `..` the API server refuses itself)
    for i, path in enumerate(["//dev", "/./dev", "/dev/./nvidiactl", "/"]):
        p = pod("research", f"spelt-{i}", "cpu")
        p["spec"]["volumes"] = [{"name": "dev", "hostPath": {"path": path}}]
        spelt.append((f"the node's /dev as {path}", p, f"hostPath {path!r}"))
    cdi = pod("research", "cdi", "cpu")
    cdi["metadata"]["annotations"] = {"cdi.k8s.io/all": "nvidia.com/gpu=all"}
    listed = pod("research", "listed", "cpu")
    listed["spec"]["volumes"] = [{"name": "v", "emptyDir": {}}]
    listed["spec"]["containers"][0]["volumeMounts"] = [
        {"name": "v", "mountPath": "/var/run/nvidia-container-devices/all"}
    ]
    no_quota = _plain("research", "unserved", "nvidia.com/mig-3g.40gb")
    return [
        (
            "a selector no GPU node of the policy can carry",
            guide,
            "nodeSelector nvidia.com/gpu.product=Tesla-T4 matches no node carrying h100-full",
        ),
        ("a thousand GPUs", thousand, "no node has more than 8"),
        ("a flavor its queue has no quota for", no_quota, "no quota for a flavor"),
        ("nodeName at creation", pinned, "nodeName 'training-0'"),
        ("another scheduler", elsewhere, "schedulerName 'volcano'"),
        ("a privileged container", privileged, "privileged container sees every GPU"),
        ("the node's /dev", devices, "hostPath '/dev'"),
        ("envFrom in a GPU container", env_from, "envFrom without a prefix"),
        ("another team's queue label", escape, "may not use queue 'production'"),
        ("a priority the queue may not use", priority, "production-critical"),
        ("a fraction above 1000", fraction, "gpu-fraction"),
        ("a GPU request hidden in an init container", _init_hidden(), "maxPerWorkload"),
        ("a profile no pool has", profile, "serves 1 × 4g.40gb"),
        ("a CPU pod that names the node's GPUs", allgpus, "NVIDIA_VISIBLE_DEVICES"),
        *spelt,
        ("a CDI annotation", cdi, "cdi.k8s.io/all asks the container runtime"),
        ("a device list as a mount", listed, "where the NVIDIA runtime reads a list"),
    ]


def test_a_debug_container_cannot_name_the_nodes_gpus(webhook: Webhook) -> None:
    api = webhook.api
    _wait_admitted(api, _plain("research", "probe", "nvidia.com/gpu"))
    debugged = pod("research", "debugged", "cpu")
    debugged["spec"]["volumes"] = [{"name": "v", "emptyDir": {}}]
    status, body = _create(api, debugged)
    assert status == 201, body

    def debug(name: str, env: list[dict[str, str]]) -> tuple[int, Any]:
        current = api.get("/api/v1/namespaces/research/pods/debugged")
        current["spec"]["ephemeralContainers"] = [
            *current["spec"].get("ephemeralContainers", []),
            {"name": name, "image": "busybox", "env": env},
        ]
        return api.call("PUT", "/api/v1/namespaces/research/pods/debugged/ephemeralcontainers",
                        current)  # fmt: skip

    status, body = debug("sneak", [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}])
    assert status == 403, body
    assert "ephemeralContainers" in body["message"] and "fix:" in body["message"], body
    status, body = debug("look", [{"name": "LANG", "value": "C"}])
    assert status == 200, body
    # it was told it gets no GPU, whatever its image sets (the mutating webhook, on the
    # subresource kubectl debug writes)
    (look,) = [c for c in body["spec"]["ephemeralContainers"] if c["name"] == "look"]
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"} in look["env"], look
    # `kubectl debug --profile=sysadmin` makes it privileged: every device of the node
    current = api.get("/api/v1/namespaces/research/pods/debugged")
    current["spec"]["ephemeralContainers"].append(
        {"name": "root", "image": "busybox", "securityContext": {"privileged": True}}
    )
    status, body = api.call("PUT", "/api/v1/namespaces/research/pods/debugged/ephemeralcontainers",
                            current)  # fmt: skip
    assert status == 403 and "privileged" in body["message"], body
    # `kubectl debug --custom` with envFrom: told it gets no GPU, whatever the source says
    current = api.get("/api/v1/namespaces/research/pods/debugged")
    current["spec"]["ephemeralContainers"].append(
        {"name": "custom", "image": "busybox", "envFrom": [{"configMapRef": {"name": "x"}}]}
    )
    status, body = api.call("PUT", "/api/v1/namespaces/research/pods/debugged/ephemeralcontainers",
                            current)  # fmt: skip
    assert status == 200, body
    (custom,) = [c for c in body["spec"]["ephemeralContainers"] if c["name"] == "custom"]
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"} in custom["env"], custom
    # nor may it mount a device list
    current = body
    current["spec"]["ephemeralContainers"].append(
        {
            "name": "lists",
            "image": "busybox",
            "volumeMounts": [{"name": "v", "mountPath": "/var/run/nvidia-container-devices/all"}],
        }
    )
    status, body = api.call("PUT", "/api/v1/namespaces/research/pods/debugged/ephemeralcontainers",
                            current)  # fmt: skip
    assert status == 403 and "reads a list of devices" in body["message"], body


def test_the_attack_matrix_is_denied_with_its_message(webhook: Webhook) -> None:
    api = webhook.api
    _wait_admitted(api, _plain("research", "probe", "nvidia.com/gpu"))
    for what, manifest, says in _attacks():
        status, body = _create(api, manifest)
        assert status == 403, (what, status, body)
        assert "pods.validate.gpucarve.io" in body["message"], (what, body["message"])
        assert says in body["message"], (what, body["message"])
        assert "fix:" in body["message"], (what, body["message"])


def test_a_selector_the_cluster_could_satisfy_is_admitted_with_a_warning(
    webhook: Webhook,
) -> None:
    """The catalog's name for the product (a node may be labelled so by hand) and the
    cluster's own labels are no certain refusal: created, the warning in the API server's
    `Warning` header (what kubectl prints) with the nearest value the nodes carry."""
    import urllib.error

    api = webhook.api
    guide = _plain("research", "guide", "nvidia.com/gpu")
    guide["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": "H100-SXM5-80GB"}
    request = urllib.request.Request(
        api.server + "/api/v1/namespaces/research/pods?dryRun=All",
        data=json.dumps(guide).encode(), method="POST",
        headers={"Authorization": f"Bearer {api.token}", "Content-Type": "application/json"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, context=api.ctx, timeout=10) as reply:
            status, warning = reply.status, reply.headers.get_all("Warning") or []
    except urllib.error.HTTPError as err:
        raise AssertionError(err.read()) from None
    assert status == 201
    assert any("did you mean nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3?" in w
               for w in warning), warning  # fmt: skip
    zoned = _plain("research", "zoned", "nvidia.com/gpu")
    zoned["spec"]["nodeSelector"] = {"topology.kubernetes.io/zone": "eu-1a"}
    status, body = _create(api, zoned, dry_run=True)
    assert status == 201, body


def test_a_queue_edited_to_a_missing_cohort_is_denied(webhook: Webhook) -> None:
    api = webhook.api
    path = "/apis/gpucarve.io/v1alpha1/queues/research"
    queue = api.get(path)
    queue["spec"]["cohort"] = "nowhere"
    status, body = api.call("PUT", path, queue)
    assert status == 403, body
    assert "cohort 'nowhere' does not exist" in body["message"]


def test_a_certificate_rotation_while_reviews_flow_drops_none(webhook: Webhook) -> None:
    api = webhook.api
    manifest = _plain("research", "flow", "nvidia.com/gpu")
    _wait_admitted(api, manifest)
    failures: list[Any] = []
    done = threading.Event()
    count = [0]

    def flow() -> None:
        while not done.is_set():
            status, body = _create(api, manifest, dry_run=True)
            count[0] += 1
            if status != 201 or body["spec"].get("schedulerName") != "gpucarve":
                failures.append((status, body))

    threads = [threading.Thread(target=flow) for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(1)
    before = count[0]
    ca = ((webhook.certs / "ca.crt").read_bytes(), (webhook.certs / "ca.key").read_bytes())
    issue(["gpucarve-webhook"], ["127.0.0.1"], datetime.now(UTC), ca=ca).write(webhook.certs)
    wait_for(lambda: "serving certificate reloaded" in webhook.log(), what="the reload")
    time.sleep(1.5)
    done.set()
    for t in threads:
        t.join(10)
    assert count[0] > before + 10, "no reviews flowed across the rotation"
    assert failures == []


def test_with_the_webhook_down_governed_pods_are_refused_others_are_not(webhook: Webhook) -> None:
    """As the README says: with the webhook down, a GPU pod of a governed namespace is
    refused (failurePolicy Fail), a CPU pod there is created (otherPodsFailurePolicy Ignore:
    the matchConditions send it to a hook of its own), and other namespaces never wait."""
    api = webhook.api
    webhook.stop()
    try:
        status, body = _create(api, _plain("research", "while-down", "nvidia.com/gpu"))
        assert status == 500 and "failed calling webhook" in body["message"], body
        status, body = _create(api, _plain("elsewhere", "while-down", "nvidia.com/gpu"))
        assert status == 201, body
        cpu = pod("research", "cpu-while-down", "cpu")
        del cpu["spec"]["schedulerName"]
        status, body = _create(api, cpu)
        assert status == 201, body
        assert "env" not in body["spec"]["containers"][0]  # admitted unchanged meanwhile
    finally:
        webhook.start()


def test_a_fraction_pod_gets_its_gpu_through_a_config_map_that_goes_with_it(
    webhook: Webhook,
) -> None:
    api, stack = webhook.api, webhook.stack
    frac = pod("notebooks", "quarter", "nvidia.com/gpu.shared")
    del frac["spec"]["schedulerName"]
    del frac["spec"]["containers"][0]["resources"]
    frac["metadata"]["annotations"] = {"gpucarve.io/gpu-fraction": "250"}
    _wait_admitted(api, _plain("notebooks", "probe", "nvidia.com/gpu.shared"))
    status, created = _create(api, frac)
    assert status == 201, created
    name = created["metadata"]["annotations"]["gpucarve.io/device-config"]
    env_from = created["spec"]["containers"][0]["envFrom"]
    assert env_from == [{"configMapRef": {"name": name}}]
    cm = f"/api/v1/namespaces/notebooks/configmaps/{name}"
    sched = Scheduler(Client.from_kubeconfig(stack.kubeconfig()),
                      load_policy(POLICY).policy, SchedulerConfig(interval_s=0.3))  # fmt: skip
    with running(sched):

        def bound_with_config() -> tuple[str, dict[str, Any]] | None:
            node = node_of(pods_in(api, "notebooks")["quarter"])
            if not node:
                return None
            status, body = api.call("GET", cm)
            assert status == 200, "bound before its device ConfigMap existed"
            return node, body

        _, config = wait_for(bound_with_config, what="the fraction pod bound")
        assigned = pods_in(api, "notebooks")["quarter"]["metadata"]["annotations"]
        slices = json.loads(assigned["gpucarve.io/assignment"])["slices"]
        gpu = slices[0].split("/")[1].removeprefix("gpu")
        assert config["data"]["NVIDIA_VISIBLE_DEVICES"] == gpu
        assert config["data"]["CUDA_DEVICE_SM_LIMIT"] == "25"
        (owner,) = config["metadata"]["ownerReferences"]
        assert owner["kind"] == "Pod" and owner["uid"] == created["metadata"]["uid"]
        api.call("DELETE", "/api/v1/namespaces/notebooks/pods/quarter?gracePeriodSeconds=0")
        wait_for(lambda: api.call("GET", cm)[0] == 404, what="the ConfigMap gone with the pod")


def test_a_pod_group_claiming_another_queue_or_priority_is_denied(webhook: Webhook) -> None:
    api = webhook.api
    path = "/apis/gpucarve.io/v1alpha1/namespaces/research/podgroups"

    def group(name: str, **spec: Any) -> dict[str, Any]:
        return {"apiVersion": "gpucarve.io/v1alpha1", "kind": "PodGroup",
                "metadata": {"name": name, "namespace": "research"},
                "spec": {"minMember": 2, **spec}}  # fmt: skip

    status, body = api.call("POST", path, group("theirs", queue="production"))
    assert status == 403 and "may not use queue 'production'" in body["message"], body
    status, body = api.call("POST", path, group("vip", priorityClassName="production-critical"))
    assert status == 403 and "production-critical" in body["message"], body
    status, body = api.call("POST", path, group("fine", queue="research"))
    assert status == 201, body
    # Kubernetes' own PodGroup (the Workload API) may not claim the priority either
    upstream = "/apis/scheduling.k8s.io/v1beta1/namespaces/research/podgroups"
    vip = {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
           "metadata": {"name": "vip", "namespace": "research"},
           "spec": {"schedulingPolicy": {"gang": {"minCount": 2}},
                    "priorityClassName": "production-critical"}}  # fmt: skip
    status, body = api.call("POST", upstream, vip)
    assert status == 403 and "production-critical" in body["message"], body
    vip["spec"].pop("priorityClassName")
    status, body = api.call("POST", upstream, vip)
    assert status == 201, body


def test_requests_unequal_to_limits_never_reach_a_scheduler(webhook: Webhook) -> None:
    # the API server itself refuses extended resources overcommitted, before any webhook:
    # gpucarve's own check (request-not-limit) is for documents that bypass it (traces)
    p = pod("research", "overcommit", "nvidia.com/gpu", 2)
    p["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "1"
    status, body = _create(webhook.api, p)
    assert status == 422, body
    assert "must be equal to nvidia.com/gpu limit" in body["message"], body["message"]


def test_a_cpu_container_taking_env_from_gets_no_gpu_through_it(webhook: Webhook) -> None:
    api = webhook.api
    _wait_admitted(api, _plain("research", "probe", "nvidia.com/gpu"))
    cpu = pod("research", "configured", "cpu")
    del cpu["spec"]["schedulerName"]
    cpu["spec"]["containers"][0]["envFrom"] = [{"configMapRef": {"name": "settings"}}]
    status, created = _create(api, cpu)
    assert status == 201, created
    (var,) = created["spec"]["containers"][0]["env"]
    assert var == {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}
    # it is not a GPU pod: the default scheduler keeps it
    assert created["spec"]["schedulerName"] == "default-scheduler"


def test_annotations_the_scheduler_acts_on_are_gpucarves_alone(webhook: Webhook) -> None:
    api = webhook.api
    _wait_admitted(api, _plain("research", "probe", "nvidia.com/gpu"))
    sneaky = _plain("research", "claims", "nvidia.com/gpu")
    sneaky["metadata"]["annotations"] = {
        "gpucarve.io/assignment": '{"slices":["training-0/gpu0"]}',
        "gpucarve.io/device-config": "precious",
        "team": "a",
    }
    status, created = _create(api, sneaky)
    assert status == 201, created
    kept = created["metadata"]["annotations"]
    assert "gpucarve.io/assignment" not in kept and "gpucarve.io/device-config" not in kept
    assert kept["team"] == "a" and "removed annotation" in kept["gpucarve.io/mutated"]
    path = "/api/v1/namespaces/research/pods/claims"

    def patch(annotations: dict[str, str | None]) -> tuple[int, Any]:
        return api.call("PATCH", path, {"metadata": {"annotations": annotations}},
                        "application/merge-patch+json")  # fmt: skip

    status, body = patch({"gpucarve.io/assignment": '{"slices":["training-1/gpu7"]}'})
    assert status == 403, body
    assert "pod-updates.validate.gpucarve.io" in body["message"] and "fix:" in body["message"]
    status, body = patch({"team": "b"})  # an ordinary update does not call the webhook
    assert status == 200, body
    webhook.stop()
    try:
        status, body = patch({"team": "c"})  # so it goes through with the webhook down
        assert status == 200, body
    finally:
        webhook.start()


def test_a_fraction_naming_a_config_map_of_its_own_gets_gpucarves_instead(webhook: Webhook) -> None:
    """A fraction whose device-config annotation names the tenant's ConfigMap: the webhook
    names gpucarve's own from the admission request instead, so the scheduler writes that one
    and never touches the tenant's (that it never overwrites one it did not write is
    test_tenant_escapes.py's back-off scenario)."""
    api, stack = webhook.api, webhook.stack
    precious = {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "precious", "namespace": "notebooks"},
                "data": {"keep": "me"}}  # fmt: skip
    api.create("/api/v1/namespaces/notebooks/configmaps", precious)
    frac = pod("notebooks", "overwriter", "nvidia.com/gpu.shared")
    del frac["spec"]["schedulerName"]
    del frac["spec"]["containers"][0]["resources"]
    frac["metadata"]["annotations"] = {
        "gpucarve.io/gpu-fraction": "250",
        "gpucarve.io/device-config": "precious",
    }
    frac["spec"]["containers"][0]["envFrom"] = [{"configMapRef": {"name": "precious"}}]
    _wait_admitted(api, _plain("notebooks", "probe", "nvidia.com/gpu.shared"))
    status, created = _create(api, frac)
    assert status == 201, created
    named = created["metadata"]["annotations"]["gpucarve.io/device-config"]
    assert named.startswith("gpucarve-gpu-"), named
    refs = created["spec"]["containers"][0]["envFrom"]
    assert refs[-1] == {"configMapRef": {"name": named}}, refs  # gpucarve's last: it wins
    sched = Scheduler(Client.from_kubeconfig(stack.kubeconfig()),
                      load_policy(POLICY).policy, SchedulerConfig(interval_s=0.3))  # fmt: skip
    with running(sched):
        wait_for(lambda: node_of(pods_in(api, "notebooks")["overwriter"]), what="bound")
    body = api.get("/api/v1/namespaces/notebooks/configmaps/precious")
    assert body["data"] == {"keep": "me"} and "ownerReferences" not in body["metadata"]
    api.call("DELETE", "/api/v1/namespaces/notebooks/pods/overwriter?gracePeriodSeconds=0")
