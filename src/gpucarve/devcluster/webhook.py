"""The admission webhook wired into the dev cluster: its certificate for 127.0.0.1, the
`gpucarve webhook serve` process, and the webhook configurations that point the API server at
it by URL (a dev cluster has no Service network). Pods then reach gpucarve as they do on a
real cluster with the chart: schedulerName, queue label and requests set, pods and Queues it
could never run refused."""

from __future__ import annotations

import base64
import os
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpucarve.devcluster.stack import StackError

MUTATE, VALIDATE = "/mutate", "/validate"


def configurations(url: str, ca_pem: bytes, governed: Sequence[str]) -> list[tuple[str, Any]]:
    """(plural, object) of the webhook configurations the chart installs, by URL: pods created
    in the governed namespaces are mutated and validated, PodGroups validated there, Queues
    everywhere. (The chart's update hook, which needs its CEL condition, is left out.)"""
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
    queues = {"apiGroups": ["gpucarve.io"], "apiVersions": ["v1alpha1"], "scope": "*",
              "operations": ["CREATE", "UPDATE"], "resources": ["queues"]}  # fmt: skip
    selector = {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In",
                                      "values": sorted(governed)}]}  # fmt: skip

    def hook(name: str, path: str, rules: list[dict[str, Any]], scoped: bool) -> dict[str, Any]:
        h: dict[str, Any] = {
            "name": name,
            "clientConfig": {"url": url + path, "caBundle": bundle},
            "rules": rules,
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "failurePolicy": "Fail",
            "timeoutSeconds": 5,
        }
        if scoped:
            h["namespaceSelector"] = selector
        return h

    mutating = {"metadata": {"name": "gpucarve"},
                "webhooks": [hook("pods.mutate.gpucarve.io", MUTATE, [pods], True)]}  # fmt: skip
    validating = {"metadata": {"name": "gpucarve"}, "webhooks": [
        hook("pods.validate.gpucarve.io", VALIDATE, [pods, debug], True),
        hook("podgroups.validate.gpucarve.io", VALIDATE, [groups], True),
        hook("claims.validate.gpucarve.io", VALIDATE, [claims], True),
        hook("queues.validate.gpucarve.io", VALIDATE, [queues], False),
    ]}  # fmt: skip
    return [
        ("mutatingwebhookconfigurations", mutating),
        ("validatingwebhookconfigurations", validating),
    ]


def start(policy: Path, workdir: Path, port: int, timeout_s: float = 30.0) -> tuple[int, bytes]:
    """Issue the certificate and start `gpucarve webhook serve` (detached: it outlives this
    process, as the dev cluster's other parts do); returns its PID and the CA."""
    certs = workdir / "webhook-certs"
    # the same commands an operator runs (the webhook room is not imported from here)
    made = subprocess.run(
        [sys.executable, "-m", "gpucarve", "webhook", "certs", "--out", str(certs), "--ip",
         "127.0.0.1"], capture_output=True, text=True, check=False)  # fmt: skip
    if made.returncode != 0:
        raise StackError(f"gpucarve webhook certs failed: {made.stderr[-400:]}")
    args = [sys.executable, "-m", "gpucarve", "webhook", "serve", "--policy", str(policy),
            "--cert-dir", str(certs), "--host", "127.0.0.1", "--port", str(port)]  # fmt: skip
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
                    return proc.pid, (certs / "ca.crt").read_bytes()
        except OSError:
            time.sleep(0.2)
    os.kill(proc.pid, 15)
    raise StackError(f"the webhook did not answer on port {port} in {timeout_s:g} s")
