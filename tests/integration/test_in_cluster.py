"""The chart's Deployment run as host processes with the pod's environment: two replicas with
the container arguments `helm template` renders, the in-cluster service account (TokenRequest
token, the API server's CA, KUBERNETES_SERVICE_HOST/PORT) and the policy ConfigMap mounted as
the kubelet mounts it. One leads and binds, the other stands by; both are ready; the policy
is followed (a valid change is used, an invalid one posted as an Event and the old one kept);
a rotated token is read again; on SIGTERM the standby takes over."""

from __future__ import annotations

import json
import signal
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucarve.devcluster.procs import free_port
from gpucarve.devcluster.stack import ADMIN_USER, LocalStack, find_binaries
from tests.integration.api import Api, wait_for
from tests.integration.chart import NAMESPACE, install, render
from tests.integration.kube_pods import condition, create_pod, node_of, pod, pods_in
from tests.integration.pod_env import (
    ConfigMapMount,
    container_args,
    pod_environment,
    service_account_dir,
    start_scheduler,
    token,
    write_atomically,
)
from tests.integration.stack_setup import populate

pytestmark = pytest.mark.integration
LEASE = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/gpucarve-scheduler"


def _policy(nominal: int) -> dict[str, Any]:
    return {
        "apiVersion": "gpucarve.io/v1alpha1",
        "kind": "Policy",
        "metadata": {"name": f"in-cluster-{nominal}"},
        "pools": [{"name": "train", "gpuModel": "H100-SXM5-80GB", "nodes": 1,
                   "gpusPerNode": 4, "sharing": "exclusive"}],
        "queues": [{"name": "research", "namespaces": ["research"],
                    "quota": {"h100-full": {"nominal": nominal}}}],
    }  # fmt: skip


@dataclass
class Replica:
    name: str
    proc: subprocess.Popen[bytes]
    port: int
    log: Path
    dashboard: int = 0

    def probe(self, path: str, port: int = 0, token: str = "") -> tuple[int, dict[str, Any]]:
        url = f"http://127.0.0.1:{port or self.port}{path}"
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            with urllib.request.urlopen(
                urllib.request.Request(url, headers=headers), timeout=5
            ) as reply:
                return reply.status, json.loads(reply.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())
        except OSError:
            return 0, {}

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@dataclass
class Cluster:
    stack: LocalStack
    admin: Api
    mount: ConfigMapMount
    sa_dir: Path
    replicas: list[Replica]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    work = tmp_path_factory.mktemp("in-cluster")
    first = work / "policy.yaml"
    first.write_text(yaml.safe_dump(_policy(1)))
    with LocalStack(find_binaries(), work / "stack", first) as stack:
        admin = Api(stack.server, stack.tokens[ADMIN_USER])
        populate(stack, admin, first, ["research"])
        objs = render(first, ["webhook.enabled=false"])
        install(admin, objs, [NAMESPACE, "gpu-operator"])
        (deployment,) = [o for o in objs if o["kind"] == "Deployment"]
        secret = {"metadata": {"name": "token-a"}, "type": "Opaque"}
        admin.create(f"/api/v1/namespaces/{NAMESPACE}/secrets", secret)
        sa_dir = service_account_dir(work / "sa", stack, token(admin, bound_secret="token-a"))
        mount = ConfigMapMount(work / "policy-mount", "policy.yaml")
        mount.write(first.read_text())
        replicas = []
        for i in range(2):
            name = f"gpucarve-{i}"
            # the replica's pod, which it labels while it leads (nothing schedules it)
            spec = {"schedulerName": "nobody", "containers": [{"name": "s", "image": "gpucarve"}]}
            admin.create(
                f"/api/v1/namespaces/{NAMESPACE}/pods",
                {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec},
            )
            env = pod_environment(stack, sa_dir, name, work)
            port, dash = free_port(), free_port()
            args = container_args(
                deployment, env, policy=str(mount.path), health_port=str(port),
                dashboard_port=str(dash),
            )  # fmt: skip
            log = work / f"{name}.log"
            replicas.append(Replica(name, start_scheduler(args, env, log), port, log, dash))
        try:
            yield Cluster(stack, admin, mount, sa_dir, replicas)
        finally:
            for r in replicas:
                if r.proc.poll() is None:
                    r.proc.send_signal(signal.SIGTERM)
            for r in replicas:
                try:
                    r.proc.wait(15)
                except subprocess.TimeoutExpired:
                    r.proc.kill()


def _holder(c: Cluster) -> str | None:
    status, lease = c.admin.call("GET", LEASE)
    return lease["spec"].get("holderIdentity") if status == 200 else None


def _leader(c: Cluster) -> Replica:
    name = wait_for(lambda: _holder(c), what="a replica holding the Lease")
    (leader,) = [r for r in c.replicas if r.name == name]
    return leader


def _labels(c: Cluster) -> dict[str, str]:
    out = {}
    for r in c.replicas:
        got = c.admin.get(f"/api/v1/namespaces/{NAMESPACE}/pods/{r.name}")
        value = (got["metadata"].get("labels") or {}).get("gpucarve.io/leader")
        if value is not None:
            out[r.name] = value
    return out


def _standby(c: Cluster, leader: Replica, value: str) -> dict[str, str]:
    return {r.name: value for r in c.replicas if r is not leader}


def _bound(c: Cluster, name: str) -> str | None:
    return node_of(pods_in(c.admin, "research").get(name) or {})


def test_one_replica_leads_both_are_ready_and_a_pod_binds(cluster: Cluster) -> None:
    leader = _leader(cluster)
    for r in cluster.replicas:
        assert r.proc.poll() is None, r.output()
        _, body = wait_for(
            lambda r=r: (s := r.probe("/readyz"))[0] == 200 and s, what=f"{r.name} ready"
        )
        assert body["leader"] is (r is leader), body
        assert r.probe("/healthz")[0] == 200
    create_pod(cluster.admin, pod("research", "first", "nvidia.com/gpu"))
    assert wait_for(lambda: _bound(cluster, "first"), what="first bound") == "train-0"
    # the dashboard's Service selects the leader's pod: only it is labelled, and it answers
    wait_for(lambda: _labels(cluster) == {leader.name: "true"} | _standby(cluster, leader, "false"),
             what="the leader's pod labelled")  # fmt: skip
    admin = cluster.stack.tokens[ADMIN_USER]

    def shows_first() -> bool:
        status, _ = leader.probe("/api/pending", leader.dashboard, admin)
        return status == 200 and leader.probe("/api/cluster", leader.dashboard, admin)[0] == 200

    wait_for(shows_first, what="the leader's dashboard")
    (standby,) = [r for r in cluster.replicas if r is not leader]
    status, body = standby.probe("/api/cluster", standby.dashboard, admin)
    assert status == 503 and "not finished a cycle" in body["message"]
    assert leader.probe("/api/cluster", leader.dashboard, "wrong")[0] == 401


def test_the_policy_is_followed_and_an_invalid_one_refused(cluster: Cluster) -> None:
    c = cluster
    _leader(c)
    create_pod(c.admin, pod("research", "second", "nvidia.com/gpu"))

    def says_quota() -> str | None:
        cond = condition(pods_in(c.admin, "research")["second"])
        return cond["message"] if cond and cond["status"] == "False" else None

    assert wait_for(says_quota, what="second waits").startswith("quota/")
    broken = _policy(3)
    broken["queues"][0]["quota"]["h100-full"]["nominal"] = "many"
    c.mount.write(yaml.safe_dump(broken))

    def refused() -> list[dict[str, Any]]:
        items = c.admin.get(f"/api/v1/namespaces/{NAMESPACE}/events")["items"]
        return [e for e in items if e["reason"] == "PolicyInvalid"]

    (event,) = wait_for(refused, what="a PolicyInvalid Event")
    assert event["type"] == "Warning"
    assert event["involvedObject"]["name"] == "gpucarve-policy"
    assert "queues[0].quota" in event["message"] and "the previous one stays" in event["message"]
    assert not _bound(c, "second"), "the invalid policy was used"
    c.mount.write(yaml.safe_dump(_policy(4)))  # room for every pod of this module
    assert wait_for(lambda: _bound(c, "second"), what="second bound after the change")


def test_a_rotated_token_is_read_again(cluster: Cluster) -> None:
    c = cluster
    admin = c.admin
    secret = {"metadata": {"name": "token-b"}, "type": "Opaque"}
    admin.create(f"/api/v1/namespaces/{NAMESPACE}/secrets", secret)
    old = Api(c.stack.server, (c.sa_dir / "token").read_text())
    assert old.call("GET", "/api/v1/nodes")[0] == 200
    write_atomically(c.sa_dir / "token", token(admin, bound_secret="token-b"))
    # the first token dies with the Secret it is bound to
    status, _ = admin.call("DELETE", f"/api/v1/namespaces/{NAMESPACE}/secrets/token-a")
    assert status == 200
    wait_for(lambda: old.call("GET", "/api/v1/nodes")[0] == 401, what="the old token refused")
    create_pod(admin, pod("research", "third", "nvidia.com/gpu"))
    assert wait_for(lambda: _bound(c, "third"), what="third bound with the new token")


def test_on_sigterm_the_standby_takes_over(cluster: Cluster) -> None:
    c = cluster
    leader = _leader(c)
    leader.proc.send_signal(signal.SIGTERM)
    assert leader.proc.wait(20) == 0, leader.output()
    (standby,) = [r for r in c.replicas if r is not leader]
    wait_for(lambda: _holder(c) == standby.name, timeout_s=30, what="the standby leads")
    # the Service now reaches the new leader; the old one said it no longer leads
    wait_for(lambda: _labels(c) == {standby.name: "true", leader.name: "false"},
             what="the new leader's pod labelled")  # fmt: skip
    create_pod(c.admin, pod("research", "fourth", "nvidia.com/gpu"))
    assert wait_for(lambda: _bound(c, "fourth"), what="fourth bound by the new leader")
    status, body = standby.probe("/readyz")
    assert status == 200 and body["leader"] is True


def test_pods_a_new_policy_leaves_out_keep_their_gpus_and_are_reported(cluster: Cluster) -> None:
    c = cluster
    running = {n: _bound(c, n) for n in ("first", "second", "third", "fourth")}
    assert all(running.values())
    # research's queue goes; a new queue for another namespace may use all four GPUs
    renamed = _policy(4)
    renamed["queues"][0].update(name="other", namespaces=["other"])
    c.admin.create("/api/v1/namespaces", {"metadata": {"name": "other"}})
    c.mount.write(yaml.safe_dump(renamed))

    def outside() -> set[str]:
        items = c.admin.get("/api/v1/namespaces/research/events")["items"]
        return {e["involvedObject"]["name"] for e in items if e["reason"] == "OutsidePolicy"}

    wait_for(lambda: outside() >= set(running), what="OutsidePolicy Events for every pod")
    create_pod(c.admin, pod("other", "newcomer", "nvidia.com/gpu"))

    def newcomer_waits() -> str | None:
        cond = condition(pods_in(c.admin, "other").get("newcomer") or {})
        return cond["message"] if cond and cond["status"] == "False" else None

    assert wait_for(newcomer_waits, what="the newcomer waits for GPUs the others hold")
    assert {n: _bound(c, n) for n in running} == running, "a pod outside the policy moved"
    assert not node_of(pods_in(c.admin, "other")["newcomer"])
