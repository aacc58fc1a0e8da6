"""Ways around the queue, tried as a tenant would: a user with the namespace's `edit` role (a
ServiceAccount bound to the built-in ClusterRole) on the stack as shipped, gpucarve's scheduler
running. Every escape is refused or neutralised; every valid pod is admitted."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gpucarve.devcluster.stack import LocalStack
from gpucarve.kube.scheduler.loop import Scheduler
from tests.integration.api import Api, wait_for
from tests.integration.kube_pods import condition, node_of, pod, pods_in
from tests.integration.stack_setup import example_policy, populated, scheduling, webhook_bypassed

pytestmark = pytest.mark.integration
NS = "research"
NAMESPACES = ["research", "production", "notebooks", "serving", "data-science", "elsewhere"]


@dataclass
class Tenancy:
    stack: LocalStack
    admin: Api
    tenant: Api  # research's `edit` role, no more
    scheduler: Scheduler
    policy_file: Path


def tenant_api(admin: Api, namespace: str) -> Api:
    """A ServiceAccount of `namespace` bound to the built-in `edit` ClusterRole there, and a
    client with its token (TokenRequest)."""
    # `edit` is aggregated by kube-controller-manager: its rules come a moment after start
    wait_for(lambda: admin.get("/apis/rbac.authorization.k8s.io/v1/clusterroles/edit")
             .get("rules"), what="the edit role aggregated")  # fmt: skip
    admin.create(f"/api/v1/namespaces/{namespace}/serviceaccounts",
                 {"metadata": {"name": "tenant"}})  # fmt: skip
    admin.create(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings", {
        "metadata": {"name": "tenant-edit"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "edit"},
        "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": namespace}],
    })  # fmt: skip
    path = f"/api/v1/namespaces/{namespace}/serviceaccounts/tenant/token"
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600}}  # fmt: skip
    status, reply = admin.call("POST", path, body)
    assert status == 201, reply
    return Api(admin.server, str(reply["status"]["token"]))


@pytest.fixture(scope="module")
def tenancy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tenancy]:
    work = tmp_path_factory.mktemp("tenant")
    policy_file = example_policy(work)
    with populated(work, policy_file, NAMESPACES) as (stack, admin, _):
        tenant = tenant_api(admin, NS)
        with scheduling(stack, policy_file) as sched:
            yield Tenancy(stack, admin, tenant, sched, policy_file)


def _usage(api: Api, queue: str) -> dict[str, Any]:
    status = api.get(f"/apis/gpucarve.io/v1alpha1/queues/{queue}").get("status") or {}
    return dict(status.get("usage") or {})


def _plain(name: str, resource: str = "nvidia.com/gpu", count: int = 1) -> dict[str, Any]:
    """A pod as a tenant writes it: no schedulerName (the webhook sets it)."""
    p = pod(NS, name, resource, count)
    del p["spec"]["schedulerName"]
    return p


def _patch(api: Api, name: str, body: dict[str, Any]) -> tuple[int, Any]:
    return api.call("PATCH", f"/api/v1/namespaces/{NS}/pods/{name}", body,
                    "application/merge-patch+json")  # fmt: skip


def test_a_bound_pods_queue_cannot_change_and_it_stays_on_its_queues_books(
    tenancy: Tenancy,
) -> None:
    admin, tenant = tenancy.admin, tenancy.tenant
    status, body = tenant.call("POST", f"/api/v1/namespaces/{NS}/pods", _plain("relabel", count=8))
    assert status == 201, body["message"]
    wait_for(lambda: node_of(pods_in(admin, NS).get("relabel") or {}), what="bound")
    wait_for(lambda: _usage(admin, "research").get("h100-full") == 8, what="charged to research")
    # the tenant moves it to another team's queue: refused
    relabel = {"metadata": {"labels": {"gpucarve.io/queue": "production"}}}
    status, body = _patch(tenant, "relabel", relabel)
    assert status == 403 and "pod-updates.validate.gpucarve.io" in body["message"], body
    assert "queue a running pod is charged to" in body["message"]
    # even past admission (the webhook away), the scheduler keeps it on research's books: the
    # queue it was admitted under is in its assignment
    why = "a relabel that got past admission: the scheduler charges the admitted queue"
    with webhook_bypassed(admin, NS, why):
        status, body = _patch(admin, "relabel", relabel)
        assert status == 200, body
    start = tenancy.scheduler.cycles
    wait_for(lambda: tenancy.scheduler.cycles > start + 3, what="more cycles")
    assert _usage(admin, "research").get("h100-full") == 8, _usage(admin, "research")
    assert not _usage(admin, "production").get("h100-full"), _usage(admin, "production")


def test_a_fractions_device_config_map_is_out_of_the_tenants_reach(tenancy: Tenancy) -> None:
    """A fraction's GPU comes from the ConfigMap the scheduler writes at binding, in the
    tenant's namespace: the tenant (edit role) may neither rewrite it (`all` would give the
    next container start every GPU of the node) nor delete and remake it; it goes with its
    pod (the garbage collector)."""
    admin = tenancy.admin
    frac = _plain("frac")
    del frac["spec"]["containers"][0]["resources"]
    frac["metadata"]["namespace"] = "notebooks"
    frac["metadata"]["annotations"] = {"gpucarve.io/gpu-fraction": "250"}
    notebooks = tenant_api(admin, "notebooks")
    status, made = notebooks.call("POST", "/api/v1/namespaces/notebooks/pods", frac)
    assert status == 201, made["message"]
    name = made["metadata"]["annotations"]["gpucarve.io/device-config"]
    path = f"/api/v1/namespaces/notebooks/configmaps/{name}"
    data = wait_for(lambda: admin.call("GET", path)[1].get("data"), what="its device ConfigMap")
    assert data["NVIDIA_VISIBLE_DEVICES"] != "all"
    status, body = notebooks.call("PATCH", path, {"data": {"NVIDIA_VISIBLE_DEVICES": "all"}},
                                  "application/merge-patch+json")  # fmt: skip
    assert status in (403, 422), body  # the webhook, or immutability, whichever answers first
    status, body = notebooks.call("DELETE", path)
    assert status == 403 and "device-configs.validate.gpucarve.io" in body["message"], body
    assert "may not delete it" in body["message"], body
    remade = {"metadata": {"name": "mine", "labels": {"app.kubernetes.io/managed-by": "gpucarve"}},
              "data": {"NVIDIA_VISIBLE_DEVICES": "all"}}  # fmt: skip
    status, body = notebooks.call("POST", "/api/v1/namespaces/notebooks/configmaps", remade)
    assert status == 403, body
    assert admin.call("GET", path)[1]["data"] == data  # untouched
    # it goes with its pod: the control plane's garbage collector may delete it
    assert notebooks.call("DELETE", "/api/v1/namespaces/notebooks/pods/frac")[0] == 200
    wait_for(lambda: admin.call("GET", path)[0] == 404, timeout_s=60, what="gone with its pod")


def test_a_pod_whose_binding_keeps_failing_backs_off_and_says_why(tenancy: Tenancy) -> None:
    """A fraction that got past admission naming a ConfigMap that is not gpucarve's (as
    shipped the webhook gives it its own): the scheduler never overwrites it, so the binding
    fails; it is tried again after a back-off per pod, not every cycle, and the pod says
    why."""
    admin, sched = tenancy.admin, tenancy.scheduler
    admin.create("/api/v1/namespaces/notebooks/configmaps",
                 {"metadata": {"name": "taken"}, "data": {"A": "1"}})  # fmt: skip
    frac = pod("notebooks", "named", "nvidia.com/gpu.shared", 1)
    del frac["spec"]["containers"][0]["resources"]
    frac["metadata"]["annotations"] = {"gpucarve.io/gpu-fraction": "250",
                                       "gpucarve.io/device-config": "taken"}  # fmt: skip
    frac["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]
    frac["spec"]["containers"][0]["envFrom"] = [{"configMapRef": {"name": "taken"}}]
    why = "a fraction naming a ConfigMap not gpucarve's: the scheduler's binding fails"
    with webhook_bypassed(admin, "notebooks", why):
        admin.create("/api/v1/namespaces/notebooks/pods", frac)

    def failures() -> int:
        return sum(1 for f in sched.binder.failed if f.startswith("notebooks/named:"))

    wait_for(lambda: failures() >= 1, what="a first failed binding")
    first = failures()

    def said() -> str | None:
        c = condition(pods_in(admin, "notebooks").get("named") or {})
        return c["message"] if c and "bind/failed" in c.get("message", "") else None

    message = wait_for(said, what="the pod saying why")
    assert "not gpucarve's device ConfigMap" in message and "tried again in" in message
    time.sleep(6)  # backing off 1, 2, 4 s: a few more tries at most, not one a cycle
    assert failures() - first <= 3, failures()
    assert not node_of(pods_in(admin, "notebooks")["named"])
    assert admin.get("/api/v1/namespaces/notebooks/configmaps/taken")["data"] == {"A": "1"}


def test_an_assignment_written_in_a_namespace_no_queue_lists_holds_no_gpu(
    tenancy: Tenancy,
) -> None:
    """No webhook runs in a namespace gpucarve does not govern: a CPU pod there naming gpucarve
    as its scheduler, pinned by nodeName, with a hand-written assignment of a node's GPUs, does
    not make gpucarve treat them as taken."""
    admin = tenancy.admin
    outsider = tenant_api(admin, "elsewhere")
    node = "training-1"
    squat = pod("elsewhere", "squat", "cpu")
    squat["spec"]["nodeName"] = node
    squat["metadata"]["annotations"] = {"gpucarve.io/assignment": json.dumps(
        {"slices": [f"{node}/gpu{i}" for i in range(8)]})}  # fmt: skip
    status, body = outsider.call("POST", "/api/v1/namespaces/elsewhere/pods", squat)
    assert status == 201, body["message"]
    wanted = _plain("on-the-squatted-node", count=8)
    wanted["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    status, body = tenancy.tenant.call("POST", f"/api/v1/namespaces/{NS}/pods", wanted)
    assert status == 201, body["message"]
    bound = wait_for(lambda: node_of(pods_in(admin, NS).get("on-the-squatted-node") or {}),
                     what="the pod bound on the node the squatter named")  # fmt: skip
    assert bound == node
