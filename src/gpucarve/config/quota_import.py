"""Read Kubernetes ResourceQuotas and PriorityClasses into a policy's queue and priority
blocks (the inverse of `gpucarve render namespaces`).

Input: what `kubectl get resourcequota,priorityclass -A -o yaml` prints (a `List`), or
objects separated by `---`. Each ResourceQuota's namespace becomes a queue; its
`requests.<gpu resource>` (or bare `<gpu resource>`) hard limits become nominal quota of the
policy's flavor that publishes that resource — named by `--policy`'s pools, since a quota
says how many `nvidia.com/gpu` but not which model. PriorityClasses keep their value,
`globalDefault` and description, and are preemptible unless labelled
`gpucarve.io/preemptible=false` (Kubernetes has no field for whether a class's pods may be
evicted; `render namespaces` writes that label).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from gpucarve.config.textfile import read_text
from gpucarve.config.yaml_source import parse_yaml
from gpucarve.core.policy import Policy
from gpucarve.core.problems import InvalidInput, Problem
from gpucarve.core.quantity import QuantityError, whole_count
from gpucarve.core.vocabulary import PREEMPTIBLE_LABEL

MAX_BYTES = 16 * 1024 * 1024
_SEPARATOR = re.compile(r"^---\s*$", re.MULTILINE)


def _objects(path: str | Path) -> tuple[str, list[dict[str, Any]]]:
    text = read_text(path, "ResourceQuotas and PriorityClasses", MAX_BYTES)
    out: list[dict[str, Any]] = []
    for i, chunk in enumerate(_SEPARATOR.split(text)):
        if not chunk.strip() or all(
            not line.strip() or line.lstrip().startswith("#") for line in chunk.splitlines()
        ):
            continue
        data = parse_yaml(chunk, f"{path} (document {i + 1})").data
        if isinstance(data, dict) and data.get("kind") == "List":
            out += [o for o in data.get("items") or [] if isinstance(o, dict)]
        elif isinstance(data, dict):
            out.append(data)
    return str(path), out


def import_quotas(path: str | Path, policy: Policy) -> dict[str, Any]:
    """`{"queues": [...], "priorityClasses": [...]}` blocks, or InvalidInput naming the object."""
    source, objs = _objects(path)
    by_resource: dict[str, list[str]] = {}
    for name, flavor in sorted(policy.flavors.items()):
        by_resource.setdefault(flavor.resource_name, []).append(name)
    problems: list[Problem] = []
    queues: dict[str, dict[str, int]] = {}
    classes: list[dict[str, Any]] = []
    for obj in objs:
        kind, meta = obj.get("kind"), obj.get("metadata") or {}
        where = (f"{kind}/{meta.get('namespace', '')}/{meta.get('name', '')}".replace("//", "/"),)
        if kind == "PriorityClass":
            labels = meta.get("labels") or {}
            pc: dict[str, Any] = {
                "name": meta.get("name"),
                "value": obj.get("value", 0),
                "preemptible": labels.get(PREEMPTIBLE_LABEL) != "false",
            }
            if obj.get("globalDefault"):
                pc["default"] = True
            if obj.get("description"):
                pc["description"] = obj["description"]
            classes.append(pc)
            continue
        if kind != "ResourceQuota":
            continue
        ns = str(meta.get("namespace") or "")
        quota = queues.setdefault(ns, {})
        for key, value in sorted(((obj.get("spec") or {}).get("hard") or {}).items()):
            resource = str(key).removeprefix("requests.").removeprefix("limits.")
            if not resource.startswith("nvidia.com/") or str(key).startswith("limits."):
                continue
            flavors = by_resource.get(resource, [])
            if len(flavors) != 1:
                fix = (
                    f"add a pool that publishes {resource}"
                    if not flavors
                    else f"split the quota by hand among {', '.join(flavors)}"
                )
                problems.append(
                    Problem(
                        (*where, "spec", "hard", str(key)),
                        "no-single-flavor",
                        f"{resource} is published by {len(flavors)} flavors of the policy",
                        fix,
                    )
                )
                continue
            try:
                quota[flavors[0]] = max(quota.get(flavors[0], 0), whole_count(str(value)))
            except QuantityError as exc:
                problems.append(
                    Problem(
                        (*where, "spec", "hard", str(key)),
                        "bad-quantity",
                        str(exc),
                        "write a whole number",
                    )
                )
    if problems:
        raise InvalidInput(source, problems)
    blocks = [
        {"name": ns, "namespaces": [ns], "quota": {f: {"nominal": n} for f, n in sorted(q.items())}}
        for ns, q in sorted(queues.items())
        if q
    ]
    return {"queues": blocks, "priorityClasses": sorted(classes, key=lambda c: str(c["name"]))}
