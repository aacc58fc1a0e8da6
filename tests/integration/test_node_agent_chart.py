"""The chart's node agent: its DaemonSet's arguments are what `gpucarve node-agent` accepts in
the pod's environment, and its ServiceAccount may do exactly what the agent does (a
TokenRequest token on the RBAC-enabled API server): every verb granted is used by an XID
taking a GPU out and clean checks bringing it back, and each one taken away is refused."""

from __future__ import annotations

import ssl
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gpucarve.agent.health_loop import NodeAgent
from gpucarve.agent.readings import Xid
from gpucarve.config.policy_build import load_policy
from gpucarve.core.vocabulary import (
    OUT_OF_SERVICE_ANNOTATION,
    REBOOT_CONDITION,
    UNHEALTHY_ANNOTATION,
)
from gpucarve.devcluster.stack import ADMIN_USER, LocalStack, find_binaries
from tests.integration.api import Api
from tests.integration.chart import NAMESPACE, install, render
from tests.integration.pod_env import (
    container_args,
    pod_environment,
    service_account_dir,
    token,
)
from tests.integration.rbac_scenario import (
    Recording,
    RecordingClient,
    Triple,
    granted,
    without,
)
from tests.integration.stack_setup import example_policy, populate
from tests.integration.test_gpu_health import NODE, FakeGpus
from tests.paths import BUILTIN

MERGE = "application/merge-patch+json"

pytestmark = pytest.mark.integration
AGENT = "gpucarve-node-agent"


def _agent_objects(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objs if o["metadata"]["name"] == AGENT]


@pytest.fixture(scope="module")
def chart_objs() -> list[dict[str, Any]]:
    return _agent_objects(render(BUILTIN / "three-teams.yaml", ["webhook.enabled=false"]))


def test_the_chart_runs_the_agent_on_gpu_nodes_as_its_own_account(
    chart_objs: list[dict[str, Any]],
) -> None:
    kinds = sorted(o["kind"] for o in chart_objs)
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "DaemonSet", "ServiceAccount"]
    (ds,) = [o for o in chart_objs if o["kind"] == "DaemonSet"]
    spec = ds["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == AGENT
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"operator": "Exists"} in spec["tolerations"]  # its own taint included
    (c,) = spec["containers"]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    # the kubelet's PodResources socket, mounted read-only (root's: the agent runs as root)
    assert {"name": "pod-resources", "mountPath": "/var/lib/kubelet/pod-resources",
            "readOnly": True} in c["volumeMounts"]  # fmt: skip
    assert spec["securityContext"]["runAsUser"] == 0
    assert "--pod-resources-socket=/var/lib/kubelet/pod-resources/kubelet.sock" in c["args"]
    plain = render(BUILTIN / "three-teams.yaml",
                   ["webhook.enabled=false", "nodeAgent.podResources.enabled=false"])  # fmt: skip
    (ds2,) = [o for o in _agent_objects(plain) if o["kind"] == "DaemonSet"]
    assert ds2["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
    assert "--pod-resources-socket=" in ds2["spec"]["template"]["spec"]["containers"][0]["args"]
    off = render(BUILTIN / "three-teams.yaml", ["webhook.enabled=false", "nodeAgent.enabled=false"])
    assert _agent_objects(off) == []


def _run(workdir: Path, objs: list[dict[str, Any]], target: Triple | None) -> Recording:
    """The agent as the chart's ServiceAccount: a GPU that fell off the bus (XID 79) and
    that the scheduler took out of service asks for a reboot; after it, the GPU is back."""
    workdir.mkdir(parents=True, exist_ok=True)
    policy_file = example_policy(workdir)
    recording = Recording()
    with LocalStack(find_binaries(), workdir / "stack", policy_file) as stack:
        admin = Api(stack.server, stack.tokens[ADMIN_USER])
        populate(stack, admin, policy_file, ["research"])
        install(admin, objs, [NAMESPACE])
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        sa = token(admin, service_account=AGENT)
        client = RecordingClient(stack.server, ctx, {"Authorization": f"Bearer {sa}"})
        client.recording = recording
        health = load_policy(policy_file, []).policy.gpu_health
        gpus = FakeGpus()
        agent = NodeAgent(client, NODE, gpus, health, lambda: datetime.now(UTC))
        gpus.pending = [Xid(2, 79)]
        try:
            agent.check()
            if target is None:
                node = admin.get(f"/api/v1/nodes/{NODE}")
                assert UNHEALTHY_ANNOTATION in node["metadata"]["annotations"]
            _as_the_scheduler(admin, {OUT_OF_SERVICE_ANNOTATION: '{"2": "fallen-off-bus"}'})
            agent.check()  # the reboot asked for
            _as_the_scheduler(admin, {}, {"nodeInfo": {"bootID": "booted-again"}})
            NodeAgent(client, NODE, FakeGpus(), health, lambda: datetime.now(UTC)).check()
            if target is None:
                node = admin.get(f"/api/v1/nodes/{NODE}")
                assert UNHEALTHY_ANNOTATION not in node["metadata"]["annotations"]
                (c,) = [c for c in node["status"]["conditions"] if c["type"] == REBOOT_CONDITION]
                assert c["status"] == "False"
        except Exception:
            if target is None or not recording.refused(target):
                raise
    return recording


def _as_the_scheduler(
    admin: Api, annotations: dict[str, str], status: dict[str, Any] | None = None
) -> None:
    """What the scheduler (and, for `status`, a reboot) would write onto the node."""
    if annotations:
        body = {"metadata": {"annotations": annotations}}
        code, answer = admin.call("PATCH", f"/api/v1/nodes/{NODE}", body, MERGE)
        assert code == 200, answer
    if status is not None:
        code, answer = admin.call("PATCH", f"/api/v1/nodes/{NODE}/status", {"status": status},
                                  MERGE)  # fmt: skip
        assert code == 200, answer


def test_the_agent_uses_every_granted_verb_and_each_is_needed(
    tmp_path: Path, chart_objs: list[dict[str, Any]]
) -> None:
    rbac = [o for o in chart_objs if o["kind"] != "DaemonSet"]
    recording = _run(tmp_path / "all", rbac, None)
    assert recording.refused() == []
    grants = granted(rbac)
    assert grants == {
        ("get", "", "nodes"),
        ("patch", "", "nodes"),
        ("patch", "", "nodes/status"),
        ("create", "", "events"),
    }
    assert recording.used() == grants
    for i, triple in enumerate(sorted(grants)):
        assert _run(tmp_path / str(i), without(rbac, triple), triple).refused(triple), triple


def test_the_daemonsets_arguments_run_in_the_pods_environment(
    tmp_path: Path, chart_objs: list[dict[str, Any]]
) -> None:
    (ds,) = [o for o in chart_objs if o["kind"] == "DaemonSet"]
    policy_file = example_policy(tmp_path)
    off = {"webhook": "the node agent's rights alone: no pod is created in a governed namespace"}
    with LocalStack(find_binaries(), tmp_path / "stack", off=off) as stack:
        admin = Api(stack.server, stack.tokens[ADMIN_USER])
        install(admin, [o for o in chart_objs if o["kind"] != "DaemonSet"], [NAMESPACE])
        sa_dir = service_account_dir(tmp_path / "sa", stack, token(admin, service_account=AGENT))
        env = pod_environment(stack, sa_dir, "agent-x", tmp_path)
        env.update({e["name"]: e.get("value", "") for e in ds["spec"]["template"]["spec"]
                    ["containers"][0]["env"] if "value" in e})  # fmt: skip
        env["NODE_NAME"] = NODE
        args = container_args(ds, env, policy=str(policy_file))
        assert args[:2] == ["node-agent", f"--node={NODE}"]
        done = subprocess.run([sys.executable, "-m", "gpucarve", *args, "--once"], env=env,
                              capture_output=True, text=True, timeout=60)  # fmt: skip
    # everything up to NVML works here (arguments, policy, in-cluster configuration); this
    # machine has no NVIDIA driver, which the agent says in one line with the fix
    assert done.returncode == 2, done.stderr
    assert "NVML cannot be used here" in done.stderr and "fix:" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
