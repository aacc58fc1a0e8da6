"""The namespace side of a policy, as Kubernetes' own admission enforces it: per namespace a
queue lists, a ResourceQuota capping each GPU resource at what its queue can ever hold
(nominal + borrowing limit; capacity of the pools when borrowing is unlimited) and a
LimitRange capping one container at the queue's `maxPerWorkload`. They are a backstop for
pods that bypass gpucarve (another scheduler, no webhook).

- Every GPU resource any pool publishes is in every ResourceQuota, at 0 where the queue has
  no quota for it: a resource left out would be unlimited for a pod that bypasses gpucarve.
- A queue of several namespaces has its ceiling split between them (evenly, the remainder
  to the first in the order the policy lists them), so together they never exceed it. A
  ResourceQuota counts gpucarve's own pods too: one namespace of such a queue then cannot
  hold more than its share even when the queue could; `split=False` gives each the whole
  ceiling instead (the backstop is then N times looser). `split_warnings` says where a
  share comes out at 0.

Extended resources take only the `requests.` prefix in a ResourceQuota (they cannot be
overcommitted, so requests equal limits). A DRA pool's devices are capped by device class
(`<class>.deviceclass.resource.k8s.io/devices`, the count of devices the namespace's claims
ask for): a claim takes at least one slice for each device it counts, so the queue's ceiling
in slices never refuses what gpucarve would admit. A LimitRange cannot name a claim, so it
caps device-plugin resources only. A gpucarve fraction asks for no device resource; only the
scheduler and the webhook govern it.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from gpucarve.core.policy import Policy, Queue
from gpucarve.core.vocabulary import MANAGED_BY_LABEL, QUEUE_LABEL
from gpucarve.render.objects import priority_class_manifest

MANAGED = {MANAGED_BY_LABEL: "gpucarve"}


def _ceilings(policy: Policy, q: Queue) -> dict[str, int]:
    """Per device resource, the most the queue can ever hold: per flavor, the least any of
    its quota keys allows (a GPU unit's converted into the flavor's slices, as if all of it
    went to that flavor: a ResourceQuota cannot sum across resources)."""
    out: dict[str, int] = defaultdict(int)
    keys = {x.flavor: x for x in q.quotas}
    for name, flavor in policy.flavors.items():
        charges = policy.quota_keys(q, name)
        if not charges:
            continue
        capacity = policy.capacity.get(name, 0)
        most = capacity
        for key, cost in charges:
            quota = keys[key]
            unit = policy.units.get(key)
            whole = capacity * cost if unit is None else unit.gpus * unit.parts_per_gpu
            if quota.borrowing_limit.unlimited:
                top = whole if q.cohort is not None else quota.nominal
            else:
                top = quota.borrowing_limit.plus(quota.nominal).or_int()
            most = min(most, top // cost)
        out[flavor.quota_name] += most
    return dict(out)


def _per_container(policy: Policy, q: Queue) -> dict[str, int]:
    out: dict[str, int] = {}
    for flavor_name, most in q.max_per_workload:
        flavor = policy.flavors.get(flavor_name)
        if flavor is not None and not flavor.dra:
            name = flavor.resource_name
            out[name] = max(out.get(name, 0), most)
    return out


def _all_resources(policy: Policy) -> list[str]:
    return sorted({f.quota_name for f in policy.flavors.values()})


def _shares(
    ceilings: dict[str, int], namespaces: tuple[str, ...], split: bool
) -> list[dict[str, int]]:
    """Each namespace's part of the queue's ceilings."""
    if not split or len(namespaces) < 2:
        return [dict(ceilings) for _ in namespaces]
    out: list[dict[str, int]] = [{} for _ in namespaces]
    for r, total in ceilings.items():
        base, extra = divmod(total, len(namespaces))
        for i, part in enumerate(out):
            part[r] = base + (1 if i < extra else 0)
    return out


def split_warnings(policy: Policy) -> list[str]:
    """Where splitting a queue's ceiling leaves a namespace none of a resource it has."""
    out = []
    for q in sorted(policy.queues, key=lambda q: q.name):
        ceilings = _ceilings(policy, q)
        for ns, share in zip(q.namespaces, _shares(ceilings, q.namespaces, True), strict=True):
            zero = sorted(r for r, n in share.items() if n == 0 and ceilings[r] > 0)
            if zero:
                out.append(f"queue {q.name}: namespace {ns} gets 0 of {', '.join(zero)} "
                           f"(the queue's ceiling is smaller than its {len(q.namespaces)} "
                           "namespaces); render with the whole ceiling per namespace, or list "
                           "fewer namespaces")  # fmt: skip
    return out


def namespace_objects(policy: Policy, split: bool = True) -> list[dict[str, Any]]:
    objs: list[dict[str, Any]] = []
    every = _all_resources(policy)
    for q in sorted(policy.queues, key=lambda q: q.name):
        ceilings = dict.fromkeys(every, 0) | _ceilings(policy, q)
        biggest = {r: str(n) for r, n in sorted(_per_container(policy, q).items())}
        for ns, share in zip(q.namespaces, _shares(ceilings, q.namespaces, split), strict=True):
            meta = {"namespace": ns, "labels": {**MANAGED, QUEUE_LABEL: q.name}}
            hard = {r: str(n) for r, n in sorted(share.items())}
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
