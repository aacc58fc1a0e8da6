"""Shadow mode on the stack as shipped: `gpucarve scheduler --shadow` runs as a process beside
kube-scheduler with a read-only role, decides every cycle for the pods kube-scheduler binds,
and writes nothing (the API server's own audit log of its requests holds reads only); its
history has, for every workload, when it really started and when gpucarve would have."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpucarve.cli.main import app
from gpucarve.devcluster.procs import free_port
from gpucarve.devcluster.stack import ADMIN_USER, LocalStack, find_binaries
from tests.integration.api import Api, probe_ready, wait_for
from tests.integration.stack_setup import example_policy, populate
from tests.integration.test_history import THEIRS, WORK, _submit_all

pytestmark = pytest.mark.integration
SHADOW = "gpucarve-shadow"
READ_ONLY = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRole",
    "metadata": {"name": "gpucarve-shadow"},
    "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list", "watch"]}],
}


def _read_only(api: Api) -> None:
    api.create("/apis/rbac.authorization.k8s.io/v1/clusterroles", READ_ONLY)
    api.create(
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {
            "metadata": {"name": "gpucarve-shadow"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "gpucarve-shadow"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": SHADOW}],
        },
    )  # fmt: skip


def _export(url: str) -> list[dict[str, Any]]:
    result = CliRunner().invoke(app, ["history", "export", "--url", url])
    assert result.exit_code == 0, result.output
    return [json.loads(x) for x in result.output.splitlines() if x.strip()]


@pytest.fixture(scope="module")
def shadowed(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str]:
    """The shadow's exported history, the audit events of its requests, and its log followed
    by its metrics."""
    work = tmp_path_factory.mktemp("shadow")
    policy_file = example_policy(work)
    # the shadow's policy maps the namespace kube-scheduler serves to a queue
    doc = yaml.safe_load(policy_file.read_text())
    next(q for q in doc["queues"] if q["name"] == "research")["namespaces"].append(THEIRS)
    shadow_policy = work / "shadow-policy.yaml"
    shadow_policy.write_text(yaml.safe_dump(doc))
    stack = LocalStack(find_binaries(), work / "stack", policy_file, users=(SHADOW,), audit=True)
    with stack:
        api = Api(stack.server, stack.tokens[ADMIN_USER])
        populate(stack, api, policy_file, [THEIRS])
        _read_only(api)
        port = free_port()
        log = work / "shadow.log"
        args = [
            sys.executable, "-m", "gpucarve", "scheduler", "--shadow",
            "--policy", str(shadow_policy), "--kubeconfig", str(stack.kubeconfig(SHADOW)),
            "--history-dir", str(work / "history"), "--health-port", str(port),
            "--health-host", "127.0.0.1", "--history-auth", "none",
        ]  # fmt: skip
        proc = subprocess.Popen(args, stdout=log.open("wb"), stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        try:
            wait_for(lambda: probe_ready(url), timeout_s=60, what="the shadow to be ready")
            _submit_all(api, THEIRS, "default-scheduler")
            wait_for(lambda: len(_ended(_export(url))) == len(WORK), timeout_s=60,
                     what="the shadow's record of every workload")  # fmt: skip
            lines = _export(url)
            with urllib.request.urlopen(url + "/metrics", timeout=10) as reply:
                metrics = reply.read().decode()
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
        time.sleep(1)  # the audit log's last events are written after the answers
        return lines, stack.audited(SHADOW), log.read_text() + "\n" + metrics


def _ended(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [x for x in lines if x["recorded"]["outcome"] == "Succeeded"]


def test_the_shadow_binds_nothing_and_writes_nothing(
    shadowed: tuple[list[dict[str, Any]], list[dict[str, Any]], str],
) -> None:
    _, audited, log = shadowed
    assert audited, "no request of the shadow in the audit log"
    verbs = {e["verb"] for e in audited}
    assert verbs <= {"get", "list", "watch"}, sorted(verbs)
    assert {"list", "watch"} <= verbs  # it did read the cluster
    assert not [e for e in audited if e.get("responseStatus", {}).get("code") == 403], log[-2000:]


def test_the_shadow_records_when_each_workload_would_have_started(
    shadowed: tuple[list[dict[str, Any]], list[dict[str, Any]], str],
) -> None:
    lines, _, log = shadowed
    by = {x["name"]: x["recorded"] for x in lines if x["namespace"] == THEIRS}
    assert sorted(by) == sorted(name for name, *_ in WORK), log[-2000:]
    submitted = {x["name"]: x["submitTime"] for x in lines if x["namespace"] == THEIRS}
    for name, rec in by.items():
        assert rec["scheduler"] == "default-scheduler" and rec["outcome"] == "Succeeded"
        if "wouldStart" not in rec:
            # only work kube-scheduler bound before the shadow's next cycle saw it waiting
            # (a race of milliseconds) has no decision of the shadow's to record
            assert rec["starts"][0] - submitted[name] <= 2, (name, rec, log[-2000:])
    decided = {n: rec for n, rec in by.items() if "wouldStart" in rec}
    # the work that waited for room the shadow saw waiting, every cycle of it
    assert {n for n, rec in by.items() if rec["starts"][0] - submitted[n] > 2} <= set(decided)
    assert any(rec["starts"][0] - submitted[n] > 2 for n, rec in by.items()), by  # some waited
    # the shadow never starts work before it arrived
    assert all(rec["wouldStart"] >= submitted[n] for n, rec in decided.items())
    print(
        {
            n: (submitted[n], rec["starts"][0], rec.get("wouldStart"))
            for n, rec in sorted(by.items())
        }
    )


def test_the_shadows_metrics_say_how_much_sooner_it_would_have_started_work(
    shadowed: tuple[list[dict[str, Any]], list[dict[str, Any]], str],
) -> None:
    _, _, text = shadowed
    counts = {
        line.split("{")[1].split("}")[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("gpucarve_shadow_start_lead_seconds_count{")
    }
    # a workload is counted once it really started, if the shadow had it ahead (would have
    # started it) in the cycle before: never more than the workloads there were
    assert sum(counts.values()) <= len(WORK), counts
    assert 'gpucarve_shadow_ahead_slices{queue="research"}' in text
    assert "# TYPE gpucarve_shadow_start_lead_seconds histogram" in text
