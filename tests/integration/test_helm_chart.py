"""The Helm chart with the real `helm`: it lints, bad values fail at install naming the field,
and everything it renders is accepted by the real API server (server-side apply, strict field
validation)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.api import Api
from tests.integration.chart import CHART, NAMESPACE, RELEASE, helm, install, object_path, render
from tests.paths import BUILTIN, EXAMPLES

pytestmark = pytest.mark.integration
POLICY = BUILTIN / "three-teams.yaml"


def test_the_chart_lints() -> None:
    done = helm("lint", str(CHART), "--strict", "--set-file", f"policy={POLICY}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout


@pytest.mark.parametrize(
    ("values", "says"),
    [
        (["replicaCount=0"], "/replicaCount"),
        (["image.pullPolicy=Sometimes"], "/image/pullPolicy"),
        (["healthPort=80"], "/healthPort"),
        (["metrics.serviceMonitor.interval=often"], "/metrics/serviceMonitor/interval"),
        (["schedulerName=Not_A_Name"], "/schedulerName"),
        (["replicas=2"], "'replicas' not allowed"),
        (["resources.requests.gpu=1"], "'gpu' not allowed"),
        (["leaderElection.enabled=false"], "leaderElection.enabled: two replicas"),
        (["serviceAccount.create=false"], "serviceAccount.name: name the ServiceAccount"),
        (["webhook.failurePolicy=Sometimes"], "/webhook/failurePolicy"),
        (["history.maxMiB=0"], "/history/maxMiB"),
        (["dashboard.gpuMetricsUrl=prometheus:9090"], "/dashboard/gpuMetricsUrl"),
        (["gpuMetricsUrl=prometheus:9090"], "/gpuMetricsUrl"),
        (["shadow=true"], "shadow: the webhook hands GPU pods to gpucarve"),
        (
            ["shadow=true", "webhook.enabled=false", "history.enabled=false"],
            "set history.enabled=true",
        ),
    ],
)
def test_bad_values_fail_naming_the_field(values: list[str], says: str) -> None:
    args = ["template", RELEASE, str(CHART), "--set-file", f"policy={POLICY}"]
    for v in values:
        args += ["--set", v]
    done = helm(*args)
    assert done.returncode != 0
    assert says in done.stderr, done.stderr


def test_no_policy_is_refused_with_the_fix() -> None:
    done = helm("template", RELEASE, str(CHART))
    assert done.returncode != 0
    assert "policy: no policy given; fix: --set-file policy=" in done.stderr
    # a policy the chart cannot read needs the webhook's namespaces named
    done = helm("template", RELEASE, str(CHART), "--set", "existingPolicyConfigMap=mine")
    assert "webhook.namespaces: no namespace to govern; fix:" in done.stderr
    done = helm("template", RELEASE, str(CHART), "--set", "existingPolicyConfigMap=mine",
                "--set", "webhook.namespaces={research}")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert '["research"]' in done.stdout


def _by_kind(objs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for o in objs:
        out.setdefault(o["kind"], []).append(o)
    return out


def test_the_rendered_objects_are_accepted_by_the_api_server(admin: Api) -> None:
    objs = render(POLICY, ["webhook.enabled=false"])  # the webhook: test_webhook_chart.py
    kinds = _by_kind(objs)
    assert sorted(kinds) == [
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "CustomResourceDefinition",
        "DaemonSet",
        "Deployment",
        "NetworkPolicy",
        "PodDisruptionBudget",
        "Role",
        "RoleBinding",
        "Service",
        "ServiceAccount",
    ]
    install(admin, objs, [NAMESPACE, "gpu-operator"])
    for obj in objs:
        stored = admin.get(object_path(admin, obj))
        assert stored["metadata"]["name"] == obj["metadata"]["name"]

    (dep,) = kinds["Deployment"]
    stored = admin.get(object_path(admin, dep))
    spec = stored["spec"]
    assert spec["replicas"] == 2
    pod = spec["template"]["spec"]
    (c,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert "--leader-elect" in c["args"]
    assert f"--lease-namespace={NAMESPACE}" in c["args"]
    # the metrics Service reaches the scheduler's pods on the port serving /metrics
    services = {s["metadata"]["labels"]["app.kubernetes.io/component"]: s for s in kinds["Service"]}
    assert sorted(services) == ["dashboard", "metrics"]
    svc = services["metrics"]
    labels = spec["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= labels.items()
    (port,) = svc["spec"]["ports"]
    assert port["targetPort"] in {p["name"] for p in c["ports"]}
    assert f"--health-port={port['port']}" in c["args"]
    # the dashboard's Service reaches the leading replica only, on the dashboard's port
    dash = services["dashboard"]["spec"]
    assert dash["selector"] == {**svc["spec"]["selector"], "gpucarve.io/leader": "true"}
    (dport,) = dash["ports"]
    (served,) = [p for p in c["ports"] if p["name"] == dport["targetPort"]]
    assert f"--dashboard-port={served['containerPort']}" in c["args"]
    assert "--dashboard-auth=kube" in c["args"]
    assert "--leader-pod=$(POD_NAMESPACE)/$(POD_NAME)" in c["args"]
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in c["env"] if "valueFrom" in e}
    assert env == {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}
    # the policy the scheduler reads is the file given to helm, byte for byte
    cms = {c["metadata"]["name"]: c for c in kinds["ConfigMap"]}
    assert set(cms) == {f"{RELEASE}-policy", "gpucarve-mig-parted-config"}
    stored_cm = admin.get(object_path(admin, cms[f"{RELEASE}-policy"]))
    assert stored_cm["data"]["policy.yaml"].strip() == POLICY.read_text().strip()
    mig = admin.get(object_path(admin, cms["gpucarve-mig-parted-config"]))
    assert mig["metadata"]["namespace"] == "gpu-operator"
    assert mig["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    (pdb,) = kinds["PodDisruptionBudget"]
    assert admin.get(object_path(admin, pdb))["spec"]["minAvailable"] == 1


def test_one_replica_has_no_disruption_budget_and_a_user_configmap_no_chart_one() -> None:
    objs = render(
        POLICY,
        ["replicaCount=1", "existingPolicyConfigMap=mine", "webhook.enabled=false"],
        crds=False,
    )
    kinds = _by_kind(objs)
    assert "PodDisruptionBudget" not in kinds
    assert [c["metadata"]["name"] for c in kinds["ConfigMap"]] == ["gpucarve-mig-parted-config"]
    (dep,) = kinds["Deployment"]
    volumes = dep["spec"]["template"]["spec"]["volumes"]
    assert {"name": "policy", "configMap": {"name": "mine", "items": [
        {"key": "policy.yaml", "path": "policy.yaml"}]}} in volumes  # fmt: skip


WRITES = {"create", "update", "patch", "delete", "deletecollection", "*"}


def _scheduler(objs: list[dict[str, Any]]) -> dict[str, Any]:
    """The scheduler's Deployment (the webhook has one too)."""
    (dep,) = [d for d in _by_kind(objs)["Deployment"] if d["metadata"]["name"] == RELEASE]
    return dep


def test_the_scheduler_reads_gpu_metrics_from_the_prometheus_the_values_name() -> None:
    def args(values: list[str]) -> list[str]:
        dep = _scheduler(render(POLICY, values, crds=False))
        out: list[str] = dep["spec"]["template"]["spec"]["containers"][0]["args"]
        return out

    url, old = "http://prometheus.monitoring:9090", "http://old:9090"
    assert f"--gpu-metrics-url={url}" in args([f"gpuMetricsUrl={url}"])
    assert f"--gpu-metrics-url={old}" in args([f"dashboard.gpuMetricsUrl={old}"])  # older values
    both = args([f"gpuMetricsUrl={url}", f"dashboard.gpuMetricsUrl={old}"])
    assert [a for a in both if a.startswith("--gpu-metrics-url")] == [f"--gpu-metrics-url={url}"]
    assert not [a for a in args([]) if a.startswith("--gpu-metrics-url")]
    # without the dashboard the idleness rules still read it
    off = args([f"gpuMetricsUrl={url}", "dashboard.enabled=false"])
    assert f"--gpu-metrics-url={url}" in off
    assert not [a for a in off if a.startswith("--dashboard-port")]


def test_the_history_is_kept_on_a_volume_the_values_size_or_name() -> None:
    dep = _scheduler(render(POLICY, ["history.maxMiB=64"], crds=False))
    pod = dep["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    assert "--history-dir=/var/lib/gpucarve/history" in args and "--history-max-mib=64" in args
    assert {"name": "history", "emptyDir": {"sizeLimit": "80Mi"}} in pod["volumes"]
    dep = _scheduler(render(POLICY, ["history.existingClaim=kept"], crds=False))
    claim = {"name": "history", "persistentVolumeClaim": {"claimName": "kept"}}
    assert claim in dep["spec"]["template"]["spec"]["volumes"]
    dep = _scheduler(render(POLICY, ["history.enabled=false"], crds=False))
    assert not [
        a for a in dep["spec"]["template"]["spec"]["containers"][0]["args"] if "history" in a
    ]
    assert "--history-auth=kube" in args  # who reads it is reviewed by the API server
    # with the dashboard off, the history's reviews still have their RBAC
    kinds = _by_kind(render(POLICY, ["dashboard.enabled=false"], crds=False))
    rules = [r for role in kinds["ClusterRole"] if role["metadata"]["name"] == RELEASE
             for r in role["rules"]]  # fmt: skip
    assert {"resources": ["tokenreviews"], "apiGroups": ["authentication.k8s.io"],
            "verbs": ["create"]} in rules  # fmt: skip
    kinds = _by_kind(render(POLICY, ["dashboard.enabled=false", "history.auth=none"], crds=False))
    rules = [r for role in kinds["ClusterRole"] if role["metadata"]["name"] == RELEASE
             for r in role["rules"]]  # fmt: skip
    assert not [r for r in rules if "tokenreviews" in r["resources"]]


def test_a_shadow_release_may_only_read_and_takes_no_lease() -> None:
    values = ["shadow=true", "webhook.enabled=false", "schedulerName=default-scheduler"]
    kinds = _by_kind(render(POLICY, values, crds=False))
    (dep,) = kinds["Deployment"]
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--shadow" in args and "--no-leader-elect" in args and "--leader-elect" not in args
    assert "--name=default-scheduler" in args
    ours = [role for role in kinds["ClusterRole"] + kinds.get("Role", [])
            if role["metadata"]["name"].startswith(RELEASE)
            and "node-agent" not in role["metadata"]["name"]]  # fmt: skip
    rules = [r for role in ours for r in role["rules"]]
    writes = [r for r in rules if set(r["verbs"]) & WRITES]
    # the dashboard's token and access reviews are questions, not changes to the cluster
    assert {tuple(r["resources"]) for r in writes} == {("tokenreviews",), ("subjectaccessreviews",)}
    assert "Lease" not in str(kinds.get("Role", []))


@pytest.mark.parametrize("command", [["device-plugin"], ["mig-config", "--config-map"]])
def test_the_rendered_nvidia_config_maps_are_accepted(admin: Api, command: list[str]) -> None:
    from typer.testing import CliRunner

    from gpucarve.cli.main import app
    from tests.integration.chart import apply, ensure_namespace

    result = CliRunner().invoke(app, ["render", *command, "--policy", str(POLICY)])
    assert result.exit_code == 0, result.output
    cm = yaml.safe_load(result.output)
    ensure_namespace(admin, "gpu-operator")
    status, body = apply(admin, cm, dry_run=True)
    assert status in (200, 201), body
    assert body["metadata"]["namespace"] == "gpu-operator"
    assert body["data"] == cm["data"]


@pytest.mark.parametrize(
    "policy", [POLICY, EXAMPLES / "dra" / "policy.yaml"], ids=["plugin", "dra"]
)
def test_the_rendered_namespace_objects_are_accepted(admin: Api, policy: Path) -> None:
    """The backstop applies as rendered, DRA pools' devices capped by device class (a
    `requests.` of a device class is refused by the API server, so none of it would apply)."""
    from typer.testing import CliRunner

    from gpucarve.cli.main import app
    from tests.integration.chart import apply, ensure_namespace

    result = CliRunner().invoke(app, ["render", "namespaces", "--policy", str(policy)])
    assert result.exit_code == 0, result.output
    objs = [o for o in yaml.safe_load_all(result.output) if o]
    kinds = sorted({o["kind"] for o in objs})
    # the DRA example has no maxPerWorkload and no priority classes: quotas alone
    assert kinds == (["LimitRange", "PriorityClass", "ResourceQuota"] if policy == POLICY
                     else ["ResourceQuota"])  # fmt: skip
    for obj in objs:
        if ns := obj["metadata"].get("namespace"):
            ensure_namespace(admin, ns)
        status, body = apply(admin, obj, dry_run=True)
        assert status in (200, 201), (obj["kind"], obj["metadata"], body)


def test_the_dashboard_ingress_is_accepted_and_routes_to_its_service(admin: Api) -> None:
    values = [
        "webhook.enabled=false",
        "nodeAgent.enabled=false",
        "dashboard.ingress.enabled=true",
        "dashboard.ingress.host=gpus.example.internal",
        "dashboard.ingress.tlsSecretName=gpus-tls",
        "dashboard.ingress.className=nginx",
    ]
    objs = [o for o in render(POLICY, values, crds=False) if o["kind"] in ("Ingress", "Service")]
    ingress = next(o for o in objs if o["kind"] == "Ingress")
    install(admin, objs, [NAMESPACE])
    stored = admin.get(object_path(admin, ingress))["spec"]
    (rule,) = stored["rules"]
    assert rule["host"] == "gpus.example.internal"
    backend = rule["http"]["paths"][0]["backend"]["service"]
    assert backend == {"name": f"{RELEASE}-dashboard", "port": {"name": "http"}}
    assert stored["tls"] == [{"secretName": "gpus-tls", "hosts": ["gpus.example.internal"]}]
    assert stored["ingressClassName"] == "nginx"


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A label selector's verdict on `labels` (matchLabels, and the operators the chart uses)."""
    if not selector.get("matchLabels", {}).items() <= labels.items():
        return False
    for e in selector.get("matchExpressions", []):
        op, key = e["operator"], e["key"]
        held = {"DoesNotExist": key not in labels, "Exists": key in labels,
                "In": labels.get(key) in e.get("values", []),
                "NotIn": labels.get(key) not in e.get("values", [])}[op]  # fmt: skip
        if not held:
            return False
    return True


def test_the_network_policies_guard_the_ports_of_the_pods_they_select(admin: Api) -> None:
    """Each NetworkPolicy selects exactly the pods it is written for, its ports are ports those
    pods name, and the API server accepts it; the webhook's keeps the pod network out."""
    from tests.integration.chart import apply, ensure_namespace

    objs = render(POLICY, ["networkPolicy.podCIDRs={10.244.0.0/16,fd00:10:244::/56}"])
    kinds = _by_kind(objs)
    templates = {
        (o["metadata"]["labels"].get("app.kubernetes.io/component") or "scheduler"):
            o["spec"]["template"]
        for o in kinds["Deployment"] + kinds["DaemonSet"]
    }  # fmt: skip
    assert sorted(templates) == ["node-agent", "scheduler", "webhook"]
    policies = {o["metadata"]["name"]: o for o in kinds["NetworkPolicy"]}
    assert sorted(policies) == [f"{RELEASE}-scheduler", f"{RELEASE}-webhook"]
    ensure_namespace(admin, NAMESPACE)
    for name, np in policies.items():
        status, body = apply(admin, np, dry_run=True)
        assert status in (200, 201), (name, body)
        guarded = [c for c, t in templates.items()
                   if _selects(np["spec"]["podSelector"], t["metadata"]["labels"])]  # fmt: skip
        assert guarded == [name.removeprefix(f"{RELEASE}-")], (name, guarded)
        (container,) = templates[guarded[0]]["spec"]["containers"]
        named = {p["name"] for p in container["ports"]}
        for rule in np["spec"]["ingress"]:
            assert {p["port"] for p in rule["ports"]} <= named, (name, rule, named)
    (health, dashboard) = policies[f"{RELEASE}-scheduler"]["spec"]["ingress"]
    assert health["from"] == [{"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": "monitoring"}}}]  # fmt: skip
    assert "from" not in dashboard  # it authenticates every request
    (hook,) = policies[f"{RELEASE}-webhook"]["spec"]["ingress"]
    assert hook["from"] == [
        {"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.244.0.0/16"]}},
        {"ipBlock": {"cidr": "::/0", "except": ["fd00:10:244::/56"]}},
    ]
    off = render(POLICY, ["networkPolicy.enabled=false"], crds=False)
    assert "NetworkPolicy" not in _by_kind(off)


def test_the_webhook_answers_inside_the_hooks_timeout_as_their_failure_policies_say() -> None:
    """The webhook is told the hooks' failure policies and a deadline inside their timeout, so
    a review it cannot decide in time gets gpucarve's answer, not the API server's timeout."""
    objs = render(POLICY, ["webhook.timeoutSeconds=10", "webhook.otherPodsFailurePolicy=Fail"])
    kinds = _by_kind(objs)
    component = "app.kubernetes.io/component"
    (hook,) = [
        d for d in kinds["Deployment"] if d["metadata"]["labels"].get(component) == "webhook"
    ]
    (c,) = hook["spec"]["template"]["spec"]["containers"]
    assert {"--failure-policy=Fail", "--other-pods-failure-policy=Fail",
            "--review-deadline=8"} <= set(c["args"]), c["args"]  # fmt: skip
    (validating,) = kinds["ValidatingWebhookConfiguration"]
    timeouts = {h["timeoutSeconds"] for h in validating["webhooks"]}
    assert timeouts == {10}
    policies = {h["name"]: h["failurePolicy"] for h in validating["webhooks"]}
    assert policies["other-pods.validate.gpucarve.io"] == "Fail"
    assert policies["pods.validate.gpucarve.io"] == "Fail"
