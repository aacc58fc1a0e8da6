"""The admission webhook wired into the dev cluster: its certificate for 127.0.0.1, the
`gpucarve webhook serve` process, and the webhook configurations the chart installs, pointed at
it by URL (a dev cluster has no Service network). Pods then reach gpucarve as they do on a
real cluster with the chart: schedulerName, queue label and requests set, pods and Queues it
could never run refused, a change to what the scheduler acts on refused. The integration
tests hold these configurations equal to the chart's rendering (test_webhook_chart.py)."""

from __future__ import annotations

import base64
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpucarve.config.policy_build import load_policy
from gpucarve.core.vocabulary import (
    FRACTION_ANNOTATION,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    MEMORY_ANNOTATION,
    QUEUE_LABELS,
    SCHEDULER_OWNED_ANNOTATIONS,
)
from gpucarve.devcluster.procs import SCHEDULER_USER, StackError

# the scheduler's account where the chart is installed by its defaults (the tests that run the
# chart's containers as host processes use its token)
CHART_SCHEDULER = "system:serviceaccount:gpucarve-system:gpucarve"

MUTATE, VALIDATE = "/mutate", "/validate"


def owned_changed_condition() -> str:
    """The CEL condition under which the API server sends a pod update to the webhook: a
    change to an annotation the scheduler acts on (the chart's `ownedAnnotationsChanged`), or
    to the queue label of a bound pod (`boundQueueChanged`)."""

    def changed(field: str, keys: Sequence[str]) -> str:
        def side(obj: str) -> str:
            return (f"(has({obj}.metadata.{field}) && k in {obj}.metadata.{field} ? "
                    f"{obj}.metadata.{field}[k] : '')")  # fmt: skip

        names = ", ".join(f"'{k}'" for k in keys)
        return f"[{names}].exists(k, {side('object')} != {side('oldObject')})"

    owned = changed("annotations", SCHEDULER_OWNED_ANNOTATIONS)
    bound = "has(oldObject.spec.nodeName) && oldObject.spec.nodeName != ''"
    return f"({owned}) || ({bound} && {changed('labels', QUEUE_LABELS)})"


def _asks(containers: str) -> str:
    limits = (
        "(has(c.resources.limits) && c.resources.limits.exists(r, r.startsWith('nvidia.com/')))"
    )
    requests = ("(has(c.resources.requests) && "
                "c.resources.requests.exists(r, r.startsWith('nvidia.com/')))")  # fmt: skip
    return f"{containers}.exists(c, has(c.resources) && ({limits} || {requests}))"


# CEL: a pod asks for GPUs (the chart's `asksGpu`): a device-plugin resource in any container,
# ResourceClaims, or a gpucarve fraction. Pods that do go to hooks that fail closed; the others
# to hooks of their own failure policy, so that a dead webhook need not stop CPU work.
ASKS_GPU = " || ".join([
    "(has(object.spec.resourceClaims) && size(object.spec.resourceClaims) > 0)",
    "(has(object.metadata.annotations) && [" + ", ".join(
        repr(k) for k in (FRACTION_ANNOTATION, MEMORY_ANNOTATION)
    ) + "].exists(k, k in object.metadata.annotations))",
    _asks("object.spec.containers"),
    f"(has(object.spec.initContainers) && {_asks('object.spec.initContainers')})",
])  # fmt: skip


def configurations(
    url: str,
    ca_pem: bytes,
    governed: Sequence[str],
    failure_policy: str = "Fail",
    other_pods: str = "Ignore",
) -> list[tuple[str, Any]]:
    """(plural, object) of the webhook configurations the chart installs, by URL: pods created
    in the governed namespaces are mutated and validated, updates that change what the
    scheduler acts on validated, PodGroups and claims validated there, Queues everywhere."""
    bundle = base64.b64encode(ca_pem).decode()
    pods = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
            "resources": ["pods"], "scope": "Namespaced"}  # fmt: skip
    # `kubectl debug` adds containers by this subresource: a way around the pod checks
    debug = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"],
             "resources": ["pods/ephemeralcontainers"], "scope": "Namespaced"}  # fmt: skip
    # gpucarve's PodGroups and Kubernetes' own (the Workload API's)
    groups = {"apiGroups": ["gpucarve.io", "scheduling.k8s.io"], "scope": "Namespaced",
              "apiVersions": ["v1alpha1", "v1beta1"], "operations": ["CREATE", "UPDATE"],
              "resources": ["podgroups"]}  # fmt: skip
    # a GPU claim no device of the policy could serve is refused when written (a claim's
    # spec never changes after)
    claims = {"apiGroups": ["resource.k8s.io"], "apiVersions": ["v1"], "scope": "Namespaced",
              "operations": ["CREATE"],
              "resources": ["resourceclaims", "resourceclaimtemplates"]}  # fmt: skip
    jobs = {"apiGroups": ["batch"], "apiVersions": ["v1"], "scope": "Namespaced",
            "operations": ["CREATE"], "resources": ["jobs"]}  # fmt: skip
    configs = {"apiGroups": [""], "apiVersions": ["v1"], "scope": "Namespaced",
               "operations": ["CREATE", "UPDATE", "DELETE"],
               "resources": ["configmaps"]}  # fmt: skip
    queues = {"apiGroups": ["gpucarve.io"], "apiVersions": ["v1alpha1"], "scope": "Cluster",
              "operations": ["CREATE", "UPDATE"], "resources": ["queues", "cohorts"]}  # fmt: skip
    updates = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"],
               "resources": ["pods"], "scope": "Namespaced"}  # fmt: skip
    selector = {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In",
                                      "values": sorted(governed)}]}  # fmt: skip

    def hook(name: str, path: str, rules: list[dict[str, Any]], scoped: bool) -> dict[str, Any]:
        h: dict[str, Any] = {
            "name": name,
            "clientConfig": {"url": url + path, "caBundle": bundle},
            "rules": rules,
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "failurePolicy": failure_policy,
            "timeoutSeconds": 5,
        }
        if scoped:
            h["namespaceSelector"] = selector
        return h

    def split(verb: str, path: str, extra: dict[str, Any]) -> list[dict[str, Any]]:
        """One hook for pods that ask for GPUs, one for the others (`other_pods`)."""
        return [
            {**hook(f"{kind}.{verb}.gpucarve.io", path, [pods, debug], True), **extra,
             "failurePolicy": policy,
             "matchConditions": [{"name": name, "expression": expression}]}
            for kind, name, expression, policy in (
                ("pods", "asks-for-gpus", ASKS_GPU, failure_policy),
                ("other-pods", "asks-for-no-gpu", f"!({ASKS_GPU})", other_pods),
            )
        ]  # fmt: skip

    owned = {**hook("pod-updates.validate.gpucarve.io", VALIDATE, [updates], False),
             "matchConditions": [{"name": "changes-scheduler-owned-annotations",
                                  "expression": owned_changed_condition()}]}  # fmt: skip
    again = {"reinvocationPolicy": "IfNeeded"}
    mutating = {"metadata": {"name": "gpucarve"}, "webhooks": split("mutate", MUTATE, again)}
    validating = {"metadata": {"name": "gpucarve"}, "webhooks": [
        *split("validate", VALIDATE, {}),
        owned,
        hook("jobs.validate.gpucarve.io", VALIDATE, [jobs], True),
        {**hook("device-configs.validate.gpucarve.io", VALIDATE, [configs], True),
         "objectSelector": {"matchLabels": {MANAGED_BY_LABEL: MANAGED_BY}}},
        hook("podgroups.validate.gpucarve.io", VALIDATE, [groups], True),
        hook("claims.validate.gpucarve.io", VALIDATE, [claims], True),
        hook("queues.validate.gpucarve.io", VALIDATE, [queues], False),
    ]}  # fmt: skip
    return [
        ("mutatingwebhookconfigurations", mutating),
        ("validatingwebhookconfigurations", validating),
    ]


def governed_namespaces(policy: Path) -> list[str]:
    """The namespaces the policy's queues list (a policy the webhook could not serve is
    refused here, with its first problem)."""
    loaded = load_policy(policy, [])
    if loaded.policy is None:
        first = loaded.problems[0] if loaded.problems else None
        raise StackError(f"{policy}: not a valid policy" + (f" ({first.plain()})" if first else ""))
    return sorted({ns for q in loaded.policy.queues for ns in q.namespaces})


def start(
    policy: Path, workdir: Path, port: int, timeout_s: float = 60.0
) -> tuple[subprocess.Popen[bytes], bytes]:
    """Issue the certificate and start `gpucarve webhook serve` (in a session of its own: it
    outlives this process, as the dev cluster's other parts do); returns it and the CA."""
    certs = workdir / "webhook-certs"
    # the same commands an operator runs (the webhook room is not imported from here)
    made = subprocess.run(
        [sys.executable, "-m", "gpucarve", "webhook", "certs", "--out", str(certs), "--ip",
         "127.0.0.1"], capture_output=True, text=True, check=False)  # fmt: skip
    if made.returncode != 0:
        raise StackError(f"gpucarve webhook certs failed: {made.stderr[-400:]}")
    args = [sys.executable, "-m", "gpucarve", "webhook", "serve", "--policy", str(policy),
            "--cert-dir", str(certs), "--host", "127.0.0.1", "--port", str(port),
            "--writer", SCHEDULER_USER, "--writer", CHART_SCHEDULER]  # fmt: skip
    log = (workdir / "webhook.log").open("ab")
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    ctx = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise StackError(f"the webhook exited with {proc.returncode}; see {log.name}")
        try:
            url = f"https://127.0.0.1:{port}/healthz"
            with urllib.request.urlopen(url, context=ctx, timeout=2) as r:
                if r.status == 200:
                    return proc, (certs / "ca.crt").read_bytes()
        except OSError:
            time.sleep(0.2)
    proc.kill()
    proc.wait(5)
    raise StackError(f"the webhook did not answer on port {port} in {timeout_s:g} s")
