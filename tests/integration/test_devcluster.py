"""`gpucarve dev-cluster up` starts the real stack with the policy's nodes; `down` stops it."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpucarve.cli.main import app
from tests.integration.api import Api, wait_for
from tests.paths import BUILTIN

pytestmark = pytest.mark.integration
EXAMPLE = BUILTIN / "three-teams.yaml"


@contextmanager
def dev_cluster(tmp_path: Path, *flags: str, policy: Path = EXAMPLE) -> Iterator[Up]:
    """`dev-cluster up` of `policy` with `flags` while the block runs, then `down`, which must
    leave none of its processes running."""
    state = tmp_path / "dc"
    runner = CliRunner()
    up = runner.invoke(app, ["dev-cluster", "up", "--policy", str(policy), "--dir", str(state),
                             *flags])  # fmt: skip
    assert up.exit_code == 0, up.output
    pids = json.loads((state / "pids.json").read_text())
    try:
        config = json.loads((state / "kubeconfig-gpucarve-admin").read_text())
        server, token = (
            config["clusters"][0]["cluster"]["server"],
            config["users"][0]["user"]["token"],
        )
        yield Up(state, Api(server, token), up.stdout, pids)
    finally:
        down = runner.invoke(app, ["dev-cluster", "down", "--dir", str(state)])
    assert down.exit_code == 0, down.output
    for pid in pids.values():
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


@dataclass(frozen=True)
class Up:
    state: Path
    api: Api  # the administrator's
    printed: str  # what `up` printed on standard output
    pids: dict[str, int]

    @property
    def kubeconfig(self) -> Path:
        return self.state / "kubeconfig-gpucarve-admin"


def test_up_creates_ready_gpu_nodes_and_down_stops_it(tmp_path: Path) -> None:
    with dev_cluster(tmp_path) as up:

        def ready() -> int:
            items = up.api.get("/api/v1/nodes")["items"]
            return sum(
                any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in n["status"].get("conditions", [])
                )
                for n in items
            )

        assert wait_for(lambda: ready() == 18, what="18 Ready nodes")
        args = ["dev-cluster", "up", "--policy", str(EXAMPLE), "--dir", str(up.state)]
        again = CliRunner().invoke(app, args)
        assert again.exit_code == 2 and "already runs" in again.output
    assert (up.state / "kube-apiserver.log").exists()


def test_up_runs_gpucarves_scheduler_and_the_printed_first_pod_binds(tmp_path: Path) -> None:
    """`dev-cluster up` as it ships starts gpucarve's scheduler (the policy applied first) with
    its dashboard, and prints a first GPU pod: created exactly as printed, with no further
    command, it binds to a fake GPU node; the scheduler starts without warnings (the GPU
    Operator's namespace is there for its MIG layouts); `down` stops it too."""
    import subprocess
    import urllib.request

    with dev_cluster(tmp_path) as up:
        assert "scheduler" in up.pids
        (line,) = [ln.strip() for ln in up.printed.splitlines() if ln.strip().startswith("echo '")]
        pod = json.loads(line[len("echo '") : line.index("' | kubectl")])
        dashboard = next(ln.split()[1] for ln in up.printed.splitlines()
                         if ln.startswith("dashboard:"))  # fmt: skip
        with urllib.request.urlopen(dashboard + "/", timeout=10) as page:
            assert page.status == 200
        api, ns = up.api, pod["metadata"]["namespace"]
        api.create(f"/api/v1/namespaces/{ns}/pods", pod)

        def bound() -> str | None:
            got = api.get(f"/api/v1/namespaces/{ns}/pods/hello-gpu")
            return got["spec"].get("nodeName") or None

        node = wait_for(bound, timeout_s=60, what="the first pod bound")
        gpus = api.get(f"/api/v1/nodes/{node}")["status"]["allocatable"]["nvidia.com/gpu"]
        assert int(gpus) >= 1
        # explain, as printed, answers for it
        explained = subprocess.run(
            [sys.executable, "-m", "gpucarve", "explain", f"{ns}/hello-gpu", "--policy",
             str(EXAMPLE), "--kubeconfig", str(up.kubeconfig)],
            capture_output=True, text=True, check=False, timeout=120,
        )  # fmt: skip
        assert explained.returncode == 0 and f"on {node}" in explained.stdout, explained
        log = (up.state / "scheduler.log").read_text()
        assert "WARNING" not in log and "bound" in log


def test_the_dev_cluster_runs_controllers_and_the_webhook(tmp_path: Path) -> None:
    """A Deployment makes pods (the controllers run), and a GPU pod written for the default
    scheduler in a governed namespace reaches gpucarve (the webhook sets schedulerName), while
    one asking for a profile no pool has is refused with the fix."""
    with dev_cluster(tmp_path) as up:
        assert {"webhook", "kube-controller-manager"} <= set(up.pids)
        api = up.api
        container = {"name": "main", "image": "fake",
                     "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}}  # fmt: skip
        deployment = {
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "infer", "namespace": "production"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "infer"}},
                     "template": {"metadata": {"labels": {"app": "infer"}},
                                  "spec": {"containers": [container]}}},
        }  # fmt: skip
        api.create("/apis/apps/v1/namespaces/production/deployments", deployment)

        def made() -> list[dict[str, object]] | None:
            items = api.get("/api/v1/namespaces/production/pods")["items"]
            return items if len(items) == 2 else None

        pods = wait_for(made, timeout_s=60, what="the Deployment's pods")
        assert all(p["spec"]["schedulerName"] == "gpucarve" for p in pods)  # type: ignore[index]
        bad = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "bad", "namespace": "production"},
               "spec": {"containers": [{**container, "resources": {"limits": {
                   "nvidia.com/mig-4g.40gb": "1"}}}]}}  # fmt: skip
        status, body = api.call("POST", "/api/v1/namespaces/production/pods", bad)
        assert status == 403 and "4g.40gb" in str(body) and "fix" in str(body)  # denied


def test_the_dev_cluster_as_shipped_runs_dra_pods_selectors_and_the_backstop(
    tmp_path: Path,
) -> None:
    """`dev-cluster up` of the DRA example, the webhook on as shipped: a pod claiming GPUs
    through a template and one through a named claim are created and bound; a pod selecting
    `kubernetes.io/hostname`, and one selecting a zone label `kubectl label` put on a node, are
    admitted and placed there; the rendered quota backstop applies (`--dry-run=server`) and caps
    DRA devices by device class; kube-scheduler binds a CPU pod of a governed namespace."""
    import subprocess

    from gpucarve.config.policy_build import load_policy
    from gpucarve.devcluster.stack import find_binaries
    from gpucarve.kube.api.client import Client
    from gpucarve.kube.scheduler.loop import Scheduler, SchedulerConfig
    from tests.integration import dra_objects as dra
    from tests.integration.kube_pods import node_of, pods_in
    from tests.integration.stack_setup import running
    from tests.paths import EXAMPLES

    policy_file = EXAMPLES / "dra" / "policy.yaml"
    state = tmp_path / "dc"
    runner = CliRunner()
    r = runner.invoke(app, ["dev-cluster", "up", "--policy", str(policy_file), "--dir", str(state)])
    assert r.exit_code == 0, r.output
    pids = json.loads((state / "pids.json").read_text())
    assert {"webhook", "kube-controller-manager", "kube-scheduler", "kwok"} <= set(pids)
    kubeconfig = state / "kubeconfig-gpucarve-admin"
    kubectl = [str(find_binaries() / "kubectl"), "--kubeconfig", str(kubeconfig)]
    try:
        config = json.loads(kubeconfig.read_text())
        api = Api(config["clusters"][0]["cluster"]["server"], config["users"][0]["user"]["token"])
        applied = runner.invoke(app, ["apply", "--policy", str(policy_file),
                                      "--kubeconfig", str(kubeconfig)])  # fmt: skip
        assert applied.exit_code == 0, applied.output
        # pods as a user writes them: no schedulerName, the webhook sets it
        template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                    "metadata": {"name": "two-h100", "namespace": "research"},
                    "spec": {"spec": dra.claim_spec([{"deviceClassName": "gpu.nvidia.com",
                                                      "count": 2}])}}  # fmt: skip
        api.create(f"{dra.RESOURCE}/namespaces/research/resourceclaimtemplates", template)
        named = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                 "metadata": {"name": "mig", "namespace": "research"},
                 "spec": dra.claim_spec([{"deviceClassName": "mig.nvidia.com", "selectors": [
                     'device.attributes["gpu.nvidia.com"].profile == "3g.40gb"']}])}  # fmt: skip
        api.create(f"{dra.RESOURCE}/namespaces/research/resourceclaims", named)
        wanted = {"by-template": dra.pod("by-template", template="two-h100"),
                  "by-claim": dra.pod("by-claim", claim="mig")}  # fmt: skip
        host = dra.pod("on-host", gpus=1)
        host["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "a100-0"}
        labelled = subprocess.run([*kubectl, "label", "node", "a100-0", "zone.example.com/z=b"],
                                  capture_output=True, text=True, check=False)  # fmt: skip
        assert labelled.returncode == 0, labelled.stderr
        zoned = dra.pod("in-zone", gpus=1)
        zoned["spec"]["nodeSelector"] = {"zone.example.com/z": "b"}
        wanted |= {"on-host": host, "in-zone": zoned}
        for name, p in wanted.items():
            del p["spec"]["schedulerName"]
            status, body = api.call("POST", "/api/v1/namespaces/research/pods", p)
            assert status == 201, (name, body)
        cpu = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "cpu-only", "namespace": "research"},
               "spec": {"containers": [{"name": "c", "image": "x"}]}}  # fmt: skip
        api.create("/api/v1/namespaces/research/pods", cpu)
        sched = Scheduler(Client.from_kubeconfig(kubeconfig), load_policy(policy_file).policy,
                          SchedulerConfig(interval_s=0.5, check_invariants=True))  # fmt: skip

        def all_bound() -> dict[str, Any] | None:
            pods = pods_in(api, "research")
            return pods if all(node_of(pods.get(n) or {}) for n in [*wanted, "cpu-only"]) else None

        with running(sched):
            bound = wait_for(all_bound, timeout_s=60, what="every pod bound")
        assert node_of(bound["on-host"]) == "a100-0" and node_of(bound["in-zone"]) == "a100-0"
        assert node_of(bound["by-template"]).startswith("h100-")
        assert node_of(bound["by-claim"]) == "a100-mig-0"
        assert bound["cpu-only"]["spec"]["schedulerName"] == "default-scheduler"
        # a selector only the cluster's labels could satisfy: admitted, and kubectl prints the
        # webhook's warning with the nearest label the policy's nodes carry
        typo = dra.pod("typo", gpus=1)
        typo["spec"]["nodeSelector"] = {"nvidia.com/gpu.prodcut": "NVIDIA-A100-SXM4-80GB"}
        (tmp_path / "typo.yaml").write_text(json.dumps(typo))
        made = subprocess.run([*kubectl, "create", "-f", str(tmp_path / "typo.yaml")],
                              capture_output=True, text=True, check=False)  # fmt: skip
        assert made.returncode == 0, made.stderr
        assert "Warning: gpucarve" in made.stderr, made.stderr
        assert "did you mean nvidia.com/gpu.product?" in made.stderr, made.stderr
        # the backstop as rendered applies on this server, DRA devices capped by class
        rendered = runner.invoke(app, ["render", "namespaces", "--policy", str(policy_file)])
        assert rendered.exit_code == 0, rendered.output
        path = tmp_path / "backstop.yaml"
        path.write_text(rendered.output)
        dry = subprocess.run([*kubectl, "apply", "--dry-run=server", "-f", str(path)],
                             capture_output=True, text=True, check=False)  # fmt: skip
        assert dry.returncode == 0, dry.stderr
        assert "resourcequota/gpucarve-gpus created (server dry run)" in dry.stdout
        assert "gpu.nvidia.com.deviceclass.resource.k8s.io/devices" in rendered.output
    finally:
        r = runner.invoke(app, ["dev-cluster", "down", "--dir", str(state)])
    assert r.exit_code == 0, r.output


def test_the_dev_cluster_runs_what_users_manifests_need(tmp_path: Path) -> None:
    """As shipped: a ResourceQuota's usage is counted, a DaemonSet makes pods kube-scheduler
    binds, a namespace can be deleted, a Workload API PodGroup is kept while a pod uses it, and
    a tenant's edit of a bound pod's assignment is refused by the pod-update webhook."""
    import subprocess

    from gpucarve.config.policy_build import load_policy
    from gpucarve.devcluster.stack import find_binaries
    from gpucarve.kube.api.client import Client
    from gpucarve.kube.scheduler.loop import Scheduler, SchedulerConfig
    from tests.integration.kube_pods import node_of, pod, pods_in
    from tests.integration.stack_setup import running

    state = tmp_path / "dc"
    runner = CliRunner()
    r = runner.invoke(app, ["dev-cluster", "up", "--policy", str(EXAMPLE), "--dir", str(state)])
    assert r.exit_code == 0, r.output
    kubeconfig = state / "kubeconfig-gpucarve-admin"
    kubectl = [str(find_binaries() / "kubectl"), "--kubeconfig", str(kubeconfig)]
    try:
        config = json.loads(kubeconfig.read_text())
        api = Api(config["clusters"][0]["cluster"]["server"], config["users"][0]["user"]["token"])
        assert runner.invoke(app, ["apply", "--policy", str(EXAMPLE), "--kubeconfig",
                                   str(kubeconfig)]).exit_code == 0  # fmt: skip
        rendered = runner.invoke(app, ["render", "namespaces", "--policy", str(EXAMPLE)])
        (tmp_path / "backstop.yaml").write_text(rendered.output)
        done = subprocess.run([*kubectl, "apply", "-f", str(tmp_path / "backstop.yaml")],
                              capture_output=True, text=True, check=False)  # fmt: skip
        assert done.returncode == 0, done.stderr
        sched = Scheduler(Client.from_kubeconfig(kubeconfig), load_policy(EXAMPLE).policy,
                          SchedulerConfig(interval_s=0.5))  # fmt: skip
        with running(sched):
            one = pod("research", "one", "nvidia.com/gpu", 1)
            del one["spec"]["schedulerName"]
            api.create("/api/v1/namespaces/research/pods", one)
            wait_for(lambda: node_of(pods_in(api, "research").get("one") or {}), what="bound")

            def used() -> str | None:
                q = api.get("/api/v1/namespaces/research/resourcequotas/gpucarve-gpus")
                return ((q.get("status") or {}).get("used") or {}).get("requests.nvidia.com/gpu")

            assert wait_for(lambda: used() == "1", what="the quota's usage counted") is True
            # the assignment the scheduler acts on is gpucarve's: a tenant's edit is refused
            patch = {"metadata": {"annotations": {"gpucarve.io/assignment": '{"x": 1}'}}}
            status, body = api.call("PATCH", "/api/v1/namespaces/research/pods/one", patch,
                                    "application/merge-patch+json")  # fmt: skip
            assert status == 403 and "pod-updates.validate.gpucarve.io" in body["message"], body
        # a DaemonSet's pods, made by its controller and bound by kube-scheduler
        everywhere = {"tolerations": [{"operator": "Exists"}],
                      "containers": [{"name": "c", "image": "x"}]}  # fmt: skip
        ds = {"apiVersion": "apps/v1", "kind": "DaemonSet",
              "metadata": {"name": "exporter", "namespace": "default"},
              "spec": {"selector": {"matchLabels": {"app": "exporter"}},
                       "template": {"metadata": {"labels": {"app": "exporter"}},
                                    "spec": everywhere}}}  # fmt: skip
        api.create("/apis/apps/v1/namespaces/default/daemonsets", ds)

        def ds_bound() -> int:
            return sum(1 for p in pods_in(api, "default").values() if node_of(p))

        assert wait_for(lambda: ds_bound() == 18, timeout_s=60, what="a pod on every node")
        # a namespace is deleted with what is in it
        api.create("/api/v1/namespaces", {"metadata": {"name": "scratch"}})
        api.create("/api/v1/namespaces/scratch/configmaps", {"metadata": {"name": "c"}})
        assert api.call("DELETE", "/api/v1/namespaces/scratch")[0] == 200
        wait_for(lambda: api.call("GET", "/api/v1/namespaces/scratch")[0] == 404,
                 timeout_s=60, what="the namespace deleted")  # fmt: skip
        # a Workload API PodGroup is kept while a pod names it
        groups = "/apis/scheduling.k8s.io/v1beta1/namespaces/research/podgroups"
        api.create(groups, {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
                            "metadata": {"name": "kept"},
                            "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}})  # fmt: skip
        member = pod("research", "member", "nvidia.com/gpu", 1)
        member["spec"]["schedulingGroup"] = {"podGroupName": "kept"}
        api.create("/api/v1/namespaces/research/pods", member)
        assert api.call("DELETE", f"{groups}/kept")[0] == 200
        time.sleep(2)
        held = api.get(f"{groups}/kept")
        assert held["metadata"].get("deletionTimestamp"), "deleted while a pod names it"
        api.call("DELETE", "/api/v1/namespaces/research/pods/member?gracePeriodSeconds=0")
        wait_for(lambda: api.call("GET", f"{groups}/kept")[0] == 404, timeout_s=60,
                 what="the PodGroup gone with its last pod")  # fmt: skip
    finally:
        r = runner.invoke(app, ["dev-cluster", "down", "--dir", str(state)])
    assert r.exit_code == 0, r.output


def test_the_readmes_helm_install_succeeds_on_the_dev_cluster(tmp_path: Path) -> None:
    """The README's `helm install` of the chart succeeds on a dev cluster started without the
    parts the chart brings itself (`--no-webhook --no-scheduler`, as the README says): the
    chart's scheduler and webhook pods are placed and run on its nodes (kwok runs no
    container), and the node agent's DaemonSet wants one pod per fake GPU node, which carry
    the GPU Operator's `nvidia.com/gpu.present` label as real ones do."""
    from tests.integration.chart import CHART, NAMESPACE, RELEASE, helm

    with dev_cluster(tmp_path, "--no-webhook", "--no-scheduler") as up:
        done = helm(
            "install", RELEASE, str(CHART), "-n", NAMESPACE, "--create-namespace",
            "--kubeconfig", str(up.kubeconfig), "--set", "image.repository=example/gpucarve",
            "--set-file", f"policy={EXAMPLE}", "--wait", "--timeout", "120s",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr

        def running() -> list[str] | None:
            pods = up.api.get(f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]
            phases = [p["status"].get("phase") for p in pods]
            return phases if len(pods) >= 4 and set(phases) == {"Running"} else None

        wait_for(running, timeout_s=60, what="the chart's pods running")
        path = f"/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets/gpucarve-node-agent"
        assert up.api.get(path)["status"]["desiredNumberScheduled"] == 18


def test_a_jobs_pod_runs_for_the_delay_its_kwok_annotation_gives(tmp_path: Path) -> None:
    """A Job whose pod template carries kwok's documented delay annotation (15 s) runs its pod
    that long on the dev cluster, not the few seconds kwok's default jitter gave."""
    with dev_cluster(tmp_path, "--no-scheduler", "--no-webhook") as up:
        template = {
            "metadata": {"annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": "15s"}},
            "spec": {"restartPolicy": "Never",
                     "containers": [{"name": "main", "image": "fake"}]},
        }  # fmt: skip
        up.api.create("/apis/batch/v1/namespaces/default/jobs",
                      {"metadata": {"name": "sleepy"}, "spec": {"template": template}})  # fmt: skip

        def done() -> dict[str, Any] | None:
            got = up.api.get("/api/v1/namespaces/default/pods?labelSelector=job-name%3Dsleepy")
            p = got["items"][0] if got["items"] else None
            return p if p is not None and p["status"].get("phase") == "Succeeded" else None

        finished = wait_for(done, timeout_s=90, what="the Job's pod completed")
        (container,) = finished["status"]["containerStatuses"]
        ran = {"started": finished["status"]["startTime"],
               "finished": container["state"]["terminated"]["finishedAt"]}  # fmt: skip
        start, end = (time.mktime(time.strptime(t, "%Y-%m-%dT%H:%M:%SZ")) for t in ran.values())
        assert 14 <= end - start <= 30, ran
