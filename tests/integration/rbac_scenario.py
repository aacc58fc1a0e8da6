"""The scheduler's whole job on a real API server, as the Helm chart's ServiceAccount: leases,
binding, a pod that waits (condition, Event, Queue status), reclaim through the Eviction API
(one victim's PodDisruptionBudget refuses it, so that pod is deleted), a dynamic MIG change
(the node and the MIG manager's ConfigMap) and a pod whose ResourceClaim gpucarve allocates
(DRA). Every call the scheduler makes is recorded with its answer, as (verb, API group,
resource) the way RBAC sees it."""

from __future__ import annotations

import contextlib
import json
import re
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpucarve.config.policy_build import load_policy
from gpucarve.core.vocabulary import DEVICE_CONFIG_ANNOTATION as DEVICE_CONFIG
from gpucarve.core.vocabulary import LEADER_LABEL, UNHEALTHY_ANNOTATION
from gpucarve.dashboard.access import KubeAccess
from gpucarve.dashboard.server import Board, app
from gpucarve.devcluster.nodes import slice_manifests
from gpucarve.devcluster.stack import ADMIN_USER, LocalStack, find_binaries
from gpucarve.kube.api.client import ApiError, Client
from gpucarve.kube.api.leader import LeaderElector
from gpucarve.kube.scheduler.health import ThreadServer
from gpucarve.kube.scheduler.leader_label import mark
from gpucarve.kube.scheduler.loop import Scheduler, SchedulerConfig
from gpucarve.kube.scheduler.mig_handoff import HandoffConfig
from gpucarve.render.dra import device_classes
from tests.dynamic_mig_policy import dynamic_mig_doc
from tests.integration.api import Api
from tests.integration.chart import NAMESPACE, install
from tests.integration.kube_pods import (
    condition,
    create_pod,
    install_coscheduling_crd,
    node_of,
    pod,
    pod_group,
    pods_in,
)
from tests.integration.mig_manager import MigManagerStandIn
from tests.integration.pod_env import token as service_account_token
from tests.integration.stack_setup import populate

CM_NS, CM_NAME = "gpu-operator", "gpucarve-mig-parted-config"
LEASE = "gpucarve-scheduler"
LEADER_POD = "gpucarve-scheduler-0"
_NOBODYS = {"schedulerName": "nobody", "containers": [{"name": "main", "image": "gpucarve"}]}
Triple = tuple[str, str, str]  # (verb, API group, resource[/subresource])

_PATH = re.compile(
    r"^/(?:api/v1|apis/(?P<group>[^/]+)/[^/]+)"
    r"(?:/namespaces/[^/]+)?/(?P<resource>[^/?]+)(?:/(?P<name>[^/?]+)(?:/(?P<sub>[^/?]+))?)?"
)
_CLAIM_STATUS = re.compile(
    r"^/apis/resource\.k8s\.io/v1/namespaces/[^/]+/resourceclaims/[^/]+/status"
)
_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


def rbac_triple(method: str, path: str) -> Triple | None:
    """How RBAC names a REST call; None for non-resource URLs (/version)."""
    m = _PATH.match(path)
    if m is None:
        return None
    resource = m["resource"] + (f"/{m['sub']}" if m["sub"] else "")
    if method == "WATCH":
        verb = "watch"
    elif method == "GET":
        verb = "get" if m["name"] else "list"
    else:
        verb = _VERBS[method]
    return verb, m["group"] or "", resource


def granted(objs: list[dict[str, Any]]) -> set[Triple]:
    """Every (verb, group, resource) the chart's ClusterRole and Roles allow."""
    out: set[Triple] = set()
    for o in objs:
        if o["kind"] in ("ClusterRole", "Role"):
            for rule in o["rules"]:
                for g in rule["apiGroups"]:
                    for r in rule["resources"]:
                        out |= {(v, g, r) for v in rule["verbs"]}
    return out


def without(objs: list[dict[str, Any]], triple: Triple) -> list[dict[str, Any]]:
    """The chart's objects with one verb on one resource taken out of its rule."""
    verb, group, resource = triple
    out = []
    for o in objs:
        o = yaml.safe_load(yaml.safe_dump(o))
        if o["kind"] in ("ClusterRole", "Role"):
            rules = []
            for rule in o["rules"]:
                if group in rule["apiGroups"] and resource in rule["resources"]:
                    # the other groups and resources of the rule keep the verb
                    rest_g = [g for g in rule["apiGroups"] if g != group]
                    rest_r = [r for r in rule["resources"] if r != resource]
                    if rest_g:
                        rules.append({**rule, "apiGroups": rest_g})
                    if rest_r:
                        rules.append({**rule, "apiGroups": [group], "resources": rest_r})
                    rule = {**rule, "apiGroups": [group], "resources": [resource]}
                    rule["verbs"] = [v for v in rule["verbs"] if v != verb]
                rules.append(rule)
            o["rules"] = [r for r in rules if r["verbs"]]
        out.append(o)
    return out


@dataclass
class Call:
    method: str
    path: str
    status: int

    @property
    def triple(self) -> Triple | None:
        return rbac_triple(self.method, self.path)


@dataclass
class Recording:
    calls: list[Call] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, method: str, path: str, status: int) -> None:
        with self.lock:
            self.calls.append(Call(method, path, status))

    def refused(self, triple: Triple | None = None) -> list[Call]:
        with self.lock:
            calls = list(self.calls)
        return [c for c in calls if c.status == 403 and (triple is None or c.triple == triple)]

    def used(self) -> set[Triple]:
        """The grants used: calls the API server authorized (a 404 or 409 was authorized too:
        the device ConfigMap the garbage collector deleted first, say)."""
        with self.lock:
            return {t for c in self.calls if (c.status < 400 or c.status in (404, 409))
                    and (t := c.triple)}  # fmt: skip


class RecordingClient(Client):
    recording: Recording

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
        *,
        busy_is_answer: bool = False,
    ) -> Any:
        claim_status = method == "PATCH" and _CLAIM_STATUS.match(path) is not None
        # Writing a claim's allocation also takes `patch resourceclaims/binding`, which the
        # API server checks inside the status write: a refusal of it comes back as 422
        binding = path.split("?")[0].removesuffix("/status") + "/binding"
        try:
            reply = super().call(method, path, body, content_type, busy_is_answer=busy_is_answer)
        except ApiError as err:
            if claim_status and 'resource="resourceclaims/binding"' in str(err):
                self.recording.add(method, binding, 403)
            self.recording.add(method, path.split("?")[0], err.status)
            raise
        self.recording.add(method, path.split("?")[0], 200)
        if claim_status:
            self.recording.add(method, binding, 200)
        return reply

    def watch(
        self,
        path: str,
        resource_version: str,
        timeout_s: int = 60,
        opened: Callable[[Callable[[], None]], None] | None = None,
    ) -> Iterator[Any]:
        try:
            first = True
            for event in super().watch(path, resource_version, timeout_s, opened):
                if first:
                    self.recording.add("WATCH", path.split("?")[0], 200)
                    first = False
                yield event
        except ApiError as err:
            self.recording.add("WATCH", path.split("?")[0], err.status)
            raise


class Refused(Exception):
    """The call under test was refused: the scenario ends there."""


def policy_doc() -> dict[str, Any]:
    """Two H100s that research may borrow and production reclaims, and the dynamic MIG pool."""
    doc = dynamic_mig_doc()
    doc["metadata"]["name"] = "rbac"
    # reclaim deletes a victim its budget keeps at once, so the scenario takes no longer
    doc["scheduling"] = {"minRuntimeSeconds": 0, "reclaimPastBudgetAfterSeconds": 0}
    doc["pools"].append(
        {
            "name": "train",
            "gpuModel": "H100-SXM5-80GB",
            "nodes": 1,
            "gpusPerNode": 2,
            "sharing": "exclusive",
        }
    )
    doc["pools"].append(
        {
            "name": "dev",
            "gpuModel": "L40S",
            "nodes": 1,
            "gpusPerNode": 1,
            "sharing": "time-slicing",
            "replicas": 4,
        }
    )
    doc["pools"].append(
        {
            "name": "dra",
            "gpuModel": "H100-SXM5-80GB",
            "nodes": 1,
            "gpusPerNode": 1,
            "sharing": "exclusive",
            "devices": "dra",
        }
    )
    doc["cohorts"] = [{"name": "lab"}]
    doc["queues"] += [
        {"name": "research", "namespaces": ["research"], "cohort": "lab",
         "quota": {"h100-full": {"nominal": 1, "borrowingLimit": 1}}},
        {"name": "production", "namespaces": ["production"], "cohort": "lab",
         "quota": {"h100-full": {"nominal": 1}}},
        {"name": "notebooks", "namespaces": ["notebooks"],
         "quota": {"l40s-shared": {"nominal": 4}, "h100-dra-full": {"nominal": 1}}},
    ]  # fmt: skip
    return doc


@dataclass
class Scenario:
    stack: LocalStack
    admin: Api
    policy_file: Path
    recording: Recording
    target: Triple | None  # the call expected to be refused; None: everything must work
    timeout_s: float = 45.0
    dashboard: str = ""  # the dashboard's base URL

    def dashboard_reviews(self) -> None:
        """A request to the dashboard with the admin's token: a TokenReview and access
        reviews."""

        def answered() -> bool:
            req = urllib.request.Request(
                f"{self.dashboard}/api/whoami",
                headers={"Authorization": f"Bearer {self.admin.token}"},
            )
            try:
                with urllib.request.urlopen(req, timeout=10) as reply:
                    return bool(json.loads(reply.read())["cluster"])
            except urllib.error.HTTPError:
                return False

        self.until(answered, "the dashboard's access reviews")

    def until(self, check: Callable[[], Any], what: str) -> Any:
        deadline = time.monotonic() + self.timeout_s
        while True:
            if self.target is not None and self.recording.refused(self.target):
                raise Refused
            value = check()
            if value:
                return value
            if time.monotonic() > deadline:
                refused = [(c.method, c.path) for c in self.recording.refused()]
                raise AssertionError(f"timed out waiting for {what}; refused: {refused}")
            time.sleep(0.2)

    def bound(self, ns: str, names: list[str]) -> bool:
        pods = pods_in(self.admin, ns)
        return all(node_of(pods.get(n) or {}) for n in names)

    def steps(self) -> None:
        a = self.admin
        # a watch is seen used at its first event: one object of each kind the scheduler
        # watches without the scenario's pods needing it (a suspended Job makes no pods),
        # made once its informers have listed, so that it arrives as a watch event (made
        # before, it comes in the list and the watch sees nothing: seen on a loaded machine)
        listed = {("list", "batch", "jobs"), ("list", "scheduling.x-k8s.io", "podgroups"),
                  ("list", "scheduling.k8s.io", "podgroups"),
                  ("list", "resource.k8s.io", "resourceslices")}  # fmt: skip
        self.until(lambda: listed <= self.recording.used(), "the informers' first lists")
        # the DRA pool's GPUs, published as its driver would once the scheduler watches
        for m in slice_manifests(load_policy(self.policy_file, []).policy):
            a.create("/apis/resource.k8s.io/v1/resourceslices", m)
        pod_group(a, "research", "other", 2, group="scheduling.x-k8s.io")
        # Kubernetes' own PodGroup (the Workload API, served by the test stack's 1.37)
        a.create("/apis/scheduling.k8s.io/v1beta1/namespaces/research/podgroups",
                 {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
                  "metadata": {"name": "upstream", "namespace": "research"},
                  "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}})  # fmt: skip
        a.create("/apis/batch/v1/namespaces/research/jobs", _suspended_job())
        pod_group(a, "research", "pair", 2)
        for n in ("r0", "r1"):
            manifest = _graceful(pod("research", n, "nvidia.com/gpu", group="pair"))
            manifest["metadata"]["labels"]["budget"] = n
            create_pod(a, manifest)
        self.until(lambda: self.bound("research", ["r0", "r1"]), "a gang bound, one GPU borrowed")
        self.until(self._group_scheduled, "the gang's PodGroup status")
        create_pod(a, pod("research", "r2", "nvidia.com/gpu"))

        def waits() -> bool:
            c = condition(pods_in(a, "research")["r2"])
            status = a.get("/apis/gpucarve.io/v1alpha1/queues/research").get("status") or {}
            return bool(c and c["status"] == "False" and status.get("pendingWorkloads") == 1)

        self.until(waits, "r2's reason and research's queue status")
        self.until(lambda: self._events("research"), "an Event on the waiting pod")
        self._budget_on_r0()
        create_pod(a, pod("production", "p0", "nvidia.com/gpu"))
        # until the evicted gang is gone, no pod may be bound onto a GPU it still holds
        self.until(
            lambda: self.once_each() and self.bound("production", ["p0"]) and self.gang_gone(),
            "reclaim through an eviction, the victims gone",
        )
        self.once_each()
        create_pod(a, pod("serving", "big", "nvidia.com/mig-7g.80gb"))
        self.until(lambda: self.bound("serving", ["big"]), "the 7g pod bound")
        for i in range(2):
            create_pod(a, pod("serving", f"small{i}", "nvidia.com/mig-1g.10gb"))
        self.until(lambda: self.bound("serving", ["small0", "small1"]), "a MIG change")
        self.fraction()
        self.claimed()
        self.dra_gpu_fault()
        self.dashboard_reviews()
        self.until(self._leader_labelled, "the leader's pod labelled")

    def _budget_on_r0(self) -> None:
        """A PodDisruptionBudget that refuses r0's eviction (no disruption controller here,
        so it never allows one): r1 is evicted, r0 deleted past its budget. The Eviction API
        passes over a budget for a pod that is not Running, and nothing runs these pods."""
        a = self.admin
        body = {"status": {"phase": "Running"}}
        code, _ = a.call("PATCH", "/api/v1/namespaces/research/pods/r0/status", body,
                         "application/merge-patch+json")  # fmt: skip
        assert code == 200
        a.create("/apis/policy/v1/namespaces/research/poddisruptionbudgets", {
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "r0"},
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"budget": "r0"}}},
        })  # fmt: skip

    def _leader_labelled(self) -> bool:
        got = self.admin.get(f"/api/v1/namespaces/{NAMESPACE}/pods/{LEADER_POD}")
        return bool(got["metadata"].get("labels", {}).get(LEADER_LABEL) == "true")

    def fraction(self) -> None:
        """A fraction-only pod as a user writes it: the webhook names its device ConfigMap,
        written at binding and deleted with it."""
        a = self.admin
        frac = pod("notebooks", "frac", "nvidia.com/gpu.shared")
        del frac["spec"]["containers"][0]["resources"]
        frac["metadata"]["annotations"] = {"gpucarve.io/gpu-fraction": "250"}
        made = a.create("/api/v1/namespaces/notebooks/pods", frac)
        name = made["metadata"]["annotations"][DEVICE_CONFIG]
        self.until(lambda: self.bound("notebooks", ["frac"]), "the fraction pod bound")
        cm = f"/api/v1/namespaces/notebooks/configmaps/{name}"
        data = self.until(lambda: a.call("GET", cm)[1].get("data"), "its device ConfigMap")
        assert data["NVIDIA_VISIBLE_DEVICES"] == "0", data
        a.call("DELETE", "/api/v1/namespaces/notebooks/pods/frac?gracePeriodSeconds=0")
        self.until(lambda: a.call("GET", cm)[0] == 404, "the ConfigMap gone with the pod")
        # the garbage collector (it owns the pod) or the scheduler, whichever comes first:
        # the scheduler deletes it too, once it sees the pod gone
        self.until(lambda: ("delete", "", "configmaps") in self.recording.used(),
                   "the scheduler's delete of the ConfigMap")  # fmt: skip

    def claimed(self) -> None:
        """A pod with a ResourceClaim (DRA): the claim allocated and reserved, then bound."""
        a = self.admin
        claim = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "one-gpu", "namespace": "notebooks"},
            "spec": {"devices": {"requests": [
                {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}
            ]}},
        }  # fmt: skip
        a.create("/apis/resource.k8s.io/v1/namespaces/notebooks/resourceclaims", claim)
        manifest = pod("notebooks", "claims", "cpu")
        manifest["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "one-gpu"}]
        create_pod(a, manifest)
        self.until(lambda: self.bound("notebooks", ["claims"]), "the claiming pod bound")
        path = "/apis/resource.k8s.io/v1/namespaces/notebooks/resourceclaims/one-gpu"
        status = a.get(path).get("status") or {}
        assert status["reservedFor"][0]["name"] == "claims", status

    def dra_gpu_fault(self) -> None:
        """The DRA node's GPU faulty as its agent writes it: taken out of service (a
        DeviceTaintRule for its device), then back (the rule deleted)."""
        a = self.admin
        fault = {"0": {"reason": "XID 94", "class": "contained-memory", "action": "reset",
                       "since": 1, "boot": "", "reset": False}}  # fmt: skip
        rules = "/apis/resource.k8s.io/v1/devicetaintrules"

        def annotate(value: str | None) -> None:
            body = {"metadata": {"annotations": {UNHEALTHY_ANNOTATION: value}}}
            code, answer = a.call("PATCH", "/api/v1/nodes/dra-0", body,
                                  "application/merge-patch+json")  # fmt: skip
            assert code == 200, answer

        annotate(json.dumps(fault))
        self.until(lambda: a.get(rules)["items"], "the faulty GPU's DeviceTaintRule")
        annotate(None)
        self.until(lambda: not a.get(rules)["items"], "its rule deleted on its return")

    def once_each(self) -> bool:
        """No slice held by two pods that exist (terminating ones included), read in one list:
        one list per namespace could see a victim before its deletion and the pod bound in its
        place after it (the scheduler binds within milliseconds of a deletion)."""
        held: dict[str, str] = {}
        for p in self.admin.get("/api/v1/pods")["items"]:
            key = f"{p['metadata']['namespace']}/{p['metadata']['name']}"
            raw = (p["metadata"].get("annotations") or {}).get("gpucarve.io/assignment")
            for sid in json.loads(raw)["slices"] if raw else []:
                assert sid not in held, f"{sid} given to {held.get(sid)} and {key}"
                held[sid] = key
        return True

    def gang_gone(self) -> bool:
        return len(pods_in(self.admin, "research")) < 3

    def _group_scheduled(self) -> bool:
        path = "/apis/gpucarve.io/v1alpha1/namespaces/research/podgroups/pair"
        status = self.admin.get(path).get("status") or {}
        return status.get("phase") in ("Scheduled", "Running") and status.get("scheduled") == 2

    def _events(self, ns: str) -> bool:
        return bool(self.admin.get(f"/api/v1/namespaces/{ns}/events")["items"])


def _suspended_job() -> dict[str, Any]:
    container = {"name": "main", "image": "trainer"}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "later"},
        "spec": {
            "suspend": True,
            "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
        },
    }


def _graceful(manifest: dict[str, Any]) -> dict[str, Any]:
    # evicted, it holds its GPU for 2 s (kwok deletes it within its grace period)
    manifest["spec"]["terminationGracePeriodSeconds"] = 2
    return manifest


def run(workdir: Path, chart_objs: list[dict[str, Any]], target: Triple | None) -> Recording:
    """A fresh stack with the chart's objects (RBAC perhaps short of `target`), the scheduler
    as the ServiceAccount; returns what it called. Ends early once `target` is refused."""
    workdir.mkdir(parents=True, exist_ok=True)
    policy_file = workdir / "policy.yaml"
    policy_file.write_text(yaml.safe_dump(policy_doc()))
    recording = Recording()
    with LocalStack(find_binaries(), workdir / "stack", policy_file) as stack:
        admin = Api(stack.server, stack.tokens[ADMIN_USER])
        # its DRA pool's slices come once the scheduler watches them (steps): created here,
        # they would come in the first list and no watch would be seen used
        populate(stack, admin, policy_file, ("research", "production", "serving", "notebooks"),
                 devices=False)  # fmt: skip
        install_coscheduling_crd(admin)
        for m in device_classes(load_policy(policy_file, []).policy):
            admin.create("/apis/resource.k8s.io/v1/deviceclasses", m)
        install(admin, chart_objs, [NAMESPACE, CM_NS])
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        token = service_account_token(admin)
        client = RecordingClient(stack.server, ctx, {"Authorization": f"Bearer {token}"})
        client.recording = recording
        # the scheduler's own pod, which it labels while it leads (nothing schedules it)
        create_pod(admin, {**pod(NAMESPACE, LEADER_POD, "cpu"), "spec": _NOBODYS})
        manager = MigManagerStandIn(admin, CM_NS, CM_NAME, {"inf-0": [{"7g.80gb": 1}] * 2})
        manager.start()
        scenario = Scenario(stack, admin, policy_file, recording, target)
        try:
            _with_scheduler(client, policy_file, scenario)
        finally:
            manager.close()
    return recording


def _with_scheduler(client: Client, policy_file: Path, scenario: Scenario) -> None:
    stop = threading.Event()
    elector = LeaderElector(client, NAMESPACE, LEASE, "rbac-test", duration_s=4, renew_s=0.5)
    mig = HandoffConfig(CM_NS, CM_NAME, propagation_s=0.3, timeout_s=60)
    sched = Scheduler(
        client,
        load_policy(policy_file, []).policy,
        SchedulerConfig(interval_s=0.3, mig=mig, check_invariants=True),
    )

    board = Board()
    sched.observers.append(board.observe)
    server = ThreadServer(app(board, KubeAccess(client, lambda: ["research"])), "127.0.0.1", 0)
    server.start()
    scenario.dashboard = f"http://127.0.0.1:{server.port}"

    def leads_then_schedules() -> None:
        if not elector.acquire(stop, retry_s=0.3):
            return
        elector.keep_renewing(stop)
        mark(client, f"{NAMESPACE}/{LEADER_POD}", leading=True)
        with contextlib.suppress(ApiError):  # recorded; the scenario sees the refusal
            sched.run(stop, elector)

    thread = threading.Thread(target=leads_then_schedules, daemon=True)
    thread.start()
    try:
        scenario.steps()
        # a renewal (get + update of the Lease) within the scenario's time, for certain
        scenario.until(lambda: _renewed(scenario.recording), "the Lease renewed")
    except Refused:
        pass
    finally:
        stop.set()
        thread.join(15)
        sched.stop()
        server.stop()
        elector.release()


def _renewed(recording: Recording) -> bool:
    return ("update", "coordination.k8s.io", "leases") in recording.used()
