"""The namespace side of a policy, as Kubernetes' own admission enforces it: per namespace a
queue lists, a ResourceQuota capping each GPU resource at what its queue can ever hold
(nominal + borrowing limit; capacity of the pools when borrowing is unlimited) and a
LimitRange capping one container at the queue's `maxPerWorkload`. They are a backstop for
pods that bypass gpucarve (another scheduler, no webhook): gpucarve's own quotas are shared
by a queue's namespaces and its cohort, which a ResourceQuota cannot express, so each
namespace gets its queue's whole ceiling. Extended resources take only the `requests.`
prefix in a ResourceQuota (they cannot be overcommitted, so requests equal limits).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from gpucarve.core.policy import Policy, Queue
from gpucarve.core.vocabulary import MANAGED_BY_LABEL, QUEUE_LABEL
from gpucarve.render.objects import priority_class_manifest

MANAGED = {MANAGED_BY_LABEL: "gpucarve"}


def _ceilings(policy: Policy, q: Queue) -> dict[str, int]:
    """Per device resource, the most the queue can ever hold."""
    out: dict[str, int] = defaultdict(int)
    for quota in q.quotas:
        flavor = policy.flavors.get(quota.flavor)
        if flavor is None:
            continue
        capacity = policy.capacity.get(quota.flavor, 0)
        if quota.borrowing_limit is None:
            most = capacity if q.cohort is not None else quota.nominal
        else:
            most = quota.nominal + quota.borrowing_limit
        out[flavor.resource_name] += min(most, capacity)
    return dict(out)


def _per_container(policy: Policy, q: Queue) -> dict[str, int]:
    out: dict[str, int] = {}
    for flavor_name, most in q.max_per_workload:
        flavor = policy.flavors.get(flavor_name)
        if flavor is not None:
            name = flavor.resource_name
            out[name] = max(out.get(name, 0), most)
    return out


def namespace_objects(policy: Policy) -> list[dict[str, Any]]:
    objs: list[dict[str, Any]] = []
    for q in sorted(policy.queues, key=lambda q: q.name):
        hard = {f"requests.{r}": str(n) for r, n in sorted(_ceilings(policy, q).items())}
        biggest = {r: str(n) for r, n in sorted(_per_container(policy, q).items())}
        for ns in q.namespaces:
            meta = {"namespace": ns, "labels": {**MANAGED, QUEUE_LABEL: q.name}}
            if hard:
                objs.append({"apiVersion": "v1", "kind": "ResourceQuota",
                             "metadata": {"name": "gpucarve-gpus", **meta},
                             "spec": {"hard": hard}})  # fmt: skip
            if biggest:
                limits = [{"type": "Container", "max": biggest}]
                objs.append({"apiVersion": "v1", "kind": "LimitRange", "spec": {"limits": limits},
                             "metadata": {"name": "gpucarve-gpus", **meta}})  # fmt: skip
    objs += [priority_class_manifest(pc) for pc in policy.priority_classes]
    return objs
