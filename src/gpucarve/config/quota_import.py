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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gpucarve.config.policy_model import PriorityClassSpec
from gpucarve.config.textfile import read_text
from gpucarve.config.yaml_source import parse_yaml
from gpucarve.core.amounts import FlavorName
from gpucarve.core.policy import Policy
from gpucarve.core.problems import InvalidInput, Problem, Severity
from gpucarve.core.quantity import QuantityError, whole_count
from gpucarve.core.vocabulary import DEVICE_CLASS_QUOTA_SUFFIX, PREEMPTIBLE_LABEL

MAX_BYTES = 16 * 1024 * 1024
_SEPARATOR = re.compile(r"^---\s*$", re.MULTILINE)
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")  # a queue (and namespace) name
Where = tuple[str | int, ...]


def _objects(path: str | Path, problems: list[Problem]) -> tuple[str, list[tuple[Where, Any]]]:
    """Each object with where it came from; what is no object goes to `problems`."""
    text = read_text(path, "ResourceQuotas and PriorityClasses", MAX_BYTES)
    out: list[tuple[Where, Any]] = []
    for i, chunk in enumerate(_SEPARATOR.split(text)):
        if not chunk.strip() or all(
            not line.strip() or line.lstrip().startswith("#") for line in chunk.splitlines()
        ):
            continue
        data = parse_yaml(chunk, f"{path} (document {i + 1})").data
        if isinstance(data, dict) and data.get("kind") == "List":
            items = data.get("items")
            if not isinstance(items, list):
                where: Where = (f"document {i + 1}", "items")
                fix = "write items: [...] (as kubectl get -o yaml does)"
                problems.append(
                    Problem(where, "not-a-list", "a List's items must be a list of objects", fix)
                )
                continue
            out += [((f"document {i + 1}", "items", k), o) for k, o in enumerate(items)]
        elif data is not None:
            out.append(((f"document {i + 1}",), data))
    return str(path), out


def _bad(where: Where, what: str, fix: str, code: str = "bad-object") -> Problem:
    return Problem(where, code, what, fix)


def _priority_class(where: Where, obj: Mapping[str, Any], meta: Mapping[str, Any]) -> Any:
    """The policy's priorityClasses entry, checked as the policy's own reader checks it."""
    labels = meta.get("labels") or {}
    if not isinstance(labels, dict):
        return _bad((*where, "metadata", "labels"), "labels is not a map", "write key: value")
    pc: dict[str, Any] = {
        "name": meta.get("name"),
        "value": obj.get("value", 0),
        "preemptible": labels.get(PREEMPTIBLE_LABEL) != "false",
    }
    if obj.get("globalDefault"):
        pc["default"] = True
    if obj.get("description"):
        pc["description"] = obj["description"]
    try:
        PriorityClassSpec.model_validate(pc, strict=True)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = str(err["loc"][0]) if err["loc"] else "value"
        return _bad((*where, field), f"{field} {pc.get(field)!r}: {err['msg']}",
                    "a name of lowercase letters, digits and '-', a whole value at most "
                    "1,000,000,000", "bad-priority-class")  # fmt: skip
    return pc


def _hard(where: Where, obj: Mapping[str, Any]) -> Mapping[str, Any] | Problem:
    spec = obj.get("spec") or {}
    if not isinstance(spec, dict):
        return _bad((*where, "spec"), "spec is not a map", "write spec: {hard: {...}}")
    hard = spec.get("hard") or {}
    if not isinstance(hard, dict):
        return _bad((*where, "spec", "hard"), "hard is not a map", "write resource: count")
    return hard


def split_by_capacity(
    n: int, flavors: Sequence[FlavorName], policy: Policy
) -> dict[FlavorName, int]:
    """`n` slices shared among `flavors` in proportion to what the pools hold of each (the
    largest remainders first, then by name), each at most its capacity."""
    caps = {f: policy.capacity.get(f, 0) for f in sorted(flavors)}
    total = sum(caps.values())
    n = min(n, total)
    if total == 0:
        return dict.fromkeys(caps, 0)
    shares = {f: n * c // total for f, c in caps.items()}
    order = sorted(caps, key=lambda f: (-(n * caps[f] % total), f))
    for f in order[: n - sum(shares.values())]:
        shares[f] += 1
    return shares


def _quota_entry(
    where: Where,
    key: str,
    value: object,
    by_resource: Mapping[str, list[FlavorName]],
    policy: Policy,
    split: bool = False,
) -> list[tuple[str, int]] | Problem | None:
    """One hard limit as (flavor, nominal) pairs (several, split by capacity, where several
    models publish the resource and `split` allows it; a warning says so); None for what is
    no GPU request limit."""
    if key.endswith(f".{DEVICE_CLASS_QUOTA_SUFFIX}"):
        resource = key  # DRA devices, by device class
    else:
        resource = key.removeprefix("requests.").removeprefix("limits.")
        if not resource.startswith("nvidia.com/") or key.startswith("limits."):
            return None
        resource = f"requests.{resource}"
    at = (*where, "spec", "hard", key)
    flavors = by_resource.get(resource, [])
    if len(flavors) > 1 and split:
        try:
            n = whole_count(str(value))
        except QuantityError as exc:
            return _bad(at, str(exc), "write a whole number", "bad-quantity")
        return sorted(split_by_capacity(n, flavors, policy).items())
    if len(flavors) != 1:
        fix = (
            f"add a pool that publishes {resource}"
            if not flavors
            else f"split the quota by hand among {', '.join(flavors)}"
        )
        return _bad(at, f"{resource} is published by {len(flavors)} flavors of the policy", fix,
                    "no-single-flavor")  # fmt: skip
    try:
        n = whole_count(str(value))
    except QuantityError as exc:
        return _bad(at, str(exc), "write a whole number", "bad-quantity")
    capacity = policy.capacity.get(flavors[0], 0)
    if n > capacity:
        return _bad(at, f"{value} {resource} but the policy's pools hold {capacity} "
                    f"{flavors[0]}", f"lower it to at most {capacity}, or add capacity",
                    "quota-exceeds-capacity")  # fmt: skip
    return [(flavors[0], n)]


def import_quotas(path: str | Path, policy: Policy) -> dict[str, Any]:
    """`{"queues": [...], "priorityClasses": [...]}` blocks, or InvalidInput naming the object."""
    problems: list[Problem] = []
    source, objs = _objects(path, problems)
    blocks, more = quota_blocks(objs, policy)
    problems += more
    if problems:
        raise InvalidInput(source, problems)
    return blocks


def quota_blocks(
    objs: Sequence[tuple[Where, Any]], policy: Policy, split: bool = False
) -> tuple[dict[str, Any], list[Problem]]:
    """The blocks of ResourceQuota and PriorityClass objects (each with where it came from),
    and what is wrong with them (a caller may report those and keep the rest). With `split`,
    a limit on a resource several models publish (`nvidia.com/gpu`) is shared among their
    flavors by capacity, with a warning, instead of refused."""
    problems: list[Problem] = []
    by_resource: dict[str, list[FlavorName]] = {}
    for name, flavor in sorted(policy.flavors.items()):
        by_resource.setdefault(flavor.quota_name, []).append(name)
    queues: dict[str, dict[str, int]] = {}
    classes: list[dict[str, Any]] = []
    for where, obj in objs:
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        if not isinstance(meta, dict):
            problems.append(_bad(where, "not an object with metadata",
                                 "give each object kind, metadata and spec"))  # fmt: skip
            continue
        kind = obj.get("kind")
        where = (*where, f"{kind}/{meta.get('namespace', '')}/{meta.get('name', '')}")
        if kind == "PriorityClass":
            pc = _priority_class(where, obj, meta)
            (problems if isinstance(pc, Problem) else classes).append(pc)
            continue
        if kind != "ResourceQuota":
            continue
        problems += _resource_quota(where, obj, meta, by_resource, policy, queues, split)
    blocks = [
        {"name": ns, "namespaces": [ns], "quota": {f: {"nominal": n} for f, n in sorted(q.items())}}
        for ns, q in sorted((ns, {f: n for f, n in q.items() if n}) for ns, q in queues.items())
        if q
    ]
    classes = sorted(classes, key=lambda c: str(c["name"]))
    return {"queues": blocks, "priorityClasses": classes}, problems


def _resource_quota(
    where: Where,
    obj: Mapping[str, Any],
    meta: Mapping[str, Any],
    by_resource: Mapping[str, list[FlavorName]],
    policy: Policy,
    queues: dict[str, dict[str, int]],
    split: bool = False,
) -> list[Problem]:
    """One ResourceQuota into its namespace's queue; what is wrong with it (and, as
    warnings, a limit split between models)."""
    ns = meta.get("namespace")
    if not isinstance(ns, str) or not _NAME.match(ns) or len(ns) > 63:
        fix = "a namespace name: lowercase letters, digits and '-', at most 63"
        return [_bad((*where, "metadata", "namespace"), f"namespace {ns!r} is no queue name", fix)]
    hard = _hard(where, obj)
    if isinstance(hard, Problem):
        return [hard]
    quota = queues.setdefault(ns, {})
    out: list[Problem] = []
    for key, value in sorted(hard.items(), key=lambda kv: str(kv[0])):
        got = _quota_entry(where, str(key), value, by_resource, policy, split)
        if isinstance(got, Problem):
            out.append(got)
            continue
        for flavor, n in got or []:
            quota[flavor] = max(quota.get(flavor, 0), n)
        if got is not None and len(got) > 1:
            parts = ", ".join(f"{n} {f}" for f, n in got)
            out.append(Problem((*where, "spec", "hard", str(key)), "split-between-models",
                               f"{value} {key} counts GPUs of several models: split by the "
                               f"pools' capacity into {parts}",
                               "change the split in the queue's quota to what the team uses",
                               Severity.WARNING))  # fmt: skip
    return out
