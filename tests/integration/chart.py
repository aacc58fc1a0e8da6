"""The Helm chart, rendered by the real `helm` (built into the test-environment cache), and its
objects put on the real API server by server-side apply with strict field validation."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from gpucarve.devcluster.stack import find_binaries
from tests.integration.api import Api

CHART = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "gpucarve"
RELEASE, NAMESPACE = "gpucarve", "gpucarve-system"


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(find_binaries() / "helm"), *args], capture_output=True, text=True, check=False
    )


def render(policy: Path, values: Sequence[str] = (), crds: bool = True) -> list[dict[str, Any]]:
    """`helm template` of the chart with the policy file; every object it renders."""
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    args += ["--set-file", f"policy={policy}"]
    for v in values:
        args += ["--set", v]
    if crds:
        args.append("--include-crds")
    done = helm(*args)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def _resources(api: Api, group_version: str) -> dict[str, tuple[str, bool]]:
    """kind -> (plural, namespaced) from the server's discovery document."""
    prefix = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
    found = api.get(prefix)["resources"]
    return {r["kind"]: (r["name"], r["namespaced"]) for r in found if "/" not in r["name"]}


def object_path(api: Api, obj: dict[str, Any]) -> str:
    gv = obj["apiVersion"]
    plural, namespaced = _resources(api, gv)[obj["kind"]]
    prefix = "/api/v1" if gv == "v1" else f"/apis/{gv}"
    meta = obj["metadata"]
    ns = f"/namespaces/{meta.get('namespace', NAMESPACE)}" if namespaced else ""
    return f"{prefix}{ns}/{plural}/{meta['name']}"


def apply(api: Api, obj: dict[str, Any], dry_run: bool = False) -> tuple[int, Any]:
    """Server-side apply, unknown or duplicate fields refused (`fieldValidation=Strict`)."""
    query = "?fieldManager=gpucarve-test&force=true&fieldValidation=Strict"
    if dry_run:
        query += "&dryRun=All"
    return api.call("PATCH", object_path(api, obj) + query, obj, "application/apply-patch+yaml")


def ensure_namespace(api: Api, name: str) -> None:
    status, body = api.call("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    assert status in (201, 409), body


def install(api: Api, objs: list[dict[str, Any]], namespaces: Sequence[str]) -> None:
    """Apply the chart's objects as `helm install` would: CRDs first, then the rest."""
    for ns in namespaces:
        ensure_namespace(api, ns)
    ordered = sorted(objs, key=lambda o: o["kind"] != "CustomResourceDefinition")
    for obj in ordered:
        status, body = apply(api, obj)
        assert status in (200, 201), (obj["kind"], obj["metadata"]["name"], body)


def dump(objs: list[dict[str, Any]]) -> str:
    return yaml.safe_dump_all(objs, sort_keys=False)
