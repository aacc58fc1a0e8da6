"""Shared set-up for the scheduler's integration tests: a stack with a policy's namespaces,
nodes and queues, and a scheduler running in a thread."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpucarve.cli.main import app
from gpucarve.config.policy_build import load_policy
from gpucarve.devcluster.stack import ADMIN_USER, LocalStack, find_binaries
from gpucarve.kube.api.client import Client
from gpucarve.kube.scheduler.loop import Scheduler, SchedulerConfig
from tests.integration.api import Api, wait_for
from tests.paths import BUILTIN


def policy_in(factory: pytest.TempPathFactory, doc: Mapping[str, Any] | str) -> Path:
    """A policy (a document, or YAML text) written as policy.yaml in a new folder."""
    path = factory.mktemp("policy") / "policy.yaml"
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(dict(doc)))
    return path


def example_policy(folder: Path) -> Path:
    """The three-team example with no minimum runtime before reclaim (tests cannot wait
    5 min), written into `folder`."""
    doc = yaml.safe_load((BUILTIN / "three-teams.yaml").read_text())
    doc.setdefault("scheduling", {})["minRuntimeSeconds"] = 0
    path = folder / "policy.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@contextmanager
def populated(
    workdir: Path, policy_file: Path, namespaces: Iterable[str]
) -> Iterator[tuple[LocalStack, Api, Path]]:
    """The stack as shipped (its webhook serving `policy_file`) in `workdir/stack` with the
    policy's namespaces, nodes and queues (`populate`), and the administrator's client, while
    the block runs."""
    with LocalStack(find_binaries(), workdir / "stack", policy_file) as stack:
        api = Api(stack.server, stack.tokens[ADMIN_USER])
        populate(stack, api, policy_file, namespaces)
        yield stack, api, policy_file


@contextmanager
def scheduling(stack: LocalStack, policy_file: Path) -> Iterator[Scheduler]:
    """A scheduler by `policy_file` on `stack`, cycling every 0.5 s with the invariants checked
    on every cycle, running in a thread while the block runs."""
    sched = Scheduler(
        Client.from_kubeconfig(stack.kubeconfig()),
        load_policy(policy_file, []).policy,
        SchedulerConfig(interval_s=0.5, check_invariants=True),
    )
    with running(sched):
        yield sched


def populate(
    stack: LocalStack,
    api: Api,
    policy_file: Path,
    namespaces: Iterable[str],
    devices: bool = True,
) -> None:
    """The namespaces (those the stack's webhook governs are there already), the policy's
    nodes (and, with `devices`, DRA pools' DeviceClasses and ResourceSlices), and its queues
    and priority classes (`apply`)."""
    for ns in namespaces:
        stack.post(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
        )
    policy = load_policy(policy_file, []).policy
    assert policy is not None
    stack.add_policy_nodes(policy, devices)
    args = ["apply", "--policy", str(policy_file), "--kubeconfig", str(stack.kubeconfig())]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, (result.output, result.exception)


@contextmanager
def running(sched: Scheduler) -> Iterator[Scheduler]:
    """The scheduler's loop in a thread, stopped (and its client closed) on the way out; when
    the block passed, the loop must have handed every cycle but a last one cut short by the
    stop to its garbage collector."""
    stop = threading.Event()
    thread = threading.Thread(target=sched.run, args=(stop,), daemon=True)
    thread.start()
    try:
        yield sched
    finally:
        stop.set()
        thread.join(10)
        sched.stop()
    assert sched.collector.seen >= sched.cycles - 1, "the loop did not collect after its cycles"


ADMISSION = "/apis/admissionregistration.k8s.io/v1"
CONFIGURATIONS = ("mutatingwebhookconfigurations", "validatingwebhookconfigurations")


def _canary(namespace: str) -> dict[str, Any]:
    """A pod the validating webhook always refuses in a governed namespace (privileged)."""
    container = {"name": "c", "image": "x", "securityContext": {"privileged": True}}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "webhook-canary", "namespace": namespace},
            "spec": {"containers": [container]}}  # fmt: skip


def _refused(api: Api, namespace: str) -> bool:
    status, _ = api.call(
        "POST", f"/api/v1/namespaces/{namespace}/pods?dryRun=All", _canary(namespace)
    )
    return status == 403


@contextmanager
def webhook_bypassed(api: Api, namespace: str, why: str) -> Iterator[None]:
    """The stack's webhook configurations taken away while the block runs, then put back: for
    a scenario of what gets past admission (a cluster whose webhook was down with
    `failurePolicy: Ignore`, objects made before gpucarve was installed). `why` says what the
    scenario needs of it (`tests/unit/devcluster/test_stack_as_shipped.py` lists them)."""
    assert why.strip(), "say why the scenario bypasses the webhook"
    saved = [(plural, api.get(f"{ADMISSION}/{plural}/gpucarve")) for plural in CONFIGURATIONS]
    for plural, _ in saved:
        status, body = api.call("DELETE", f"{ADMISSION}/{plural}/gpucarve")
        assert status == 200, body
    wait_for(lambda: not _refused(api, namespace), what="the API server to stop calling it")
    try:
        yield
    finally:
        for plural, obj in saved:
            meta = {k: v for k, v in obj["metadata"].items() if k in ("name", "labels")}
            api.create(f"{ADMISSION}/{plural}", {**obj, "metadata": meta})
        wait_for(lambda: _refused(api, namespace), what="the API server to call it again")


def namespace_reader(api: Api, ns: str = "research") -> str:
    """A service account (alice) that may list `ns`'s pods and nothing else; its token."""
    api.create(
        f"/api/v1/namespaces/{ns}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "alice"}},
    )
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}"
    api.create(
        f"{rbac}/roles",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "pod-reader"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}],
        },
    )
    api.create(
        f"{rbac}/rolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "alice-reads-pods"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "pod-reader",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "alice", "namespace": ns}],
        },
    )
    got = api.create(
        f"/api/v1/namespaces/{ns}/serviceaccounts/alice/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    return str(got["status"]["token"])
