"""The policy's queues, cohorts and priority classes as Kubernetes objects (and back)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpucarve.core.amounts import QuotaKey
from gpucarve.core.held_idle import IdleRule
from gpucarve.core.policy import Cohort, GpuUnit, Policy, PriorityClass, Queue, Quota
from gpucarve.core.vocabulary import GROUP, PREEMPTIBLE_LABEL, VERSION
from gpucarve.core.vocabulary import MANAGED_BY_LABEL as MANAGED_LABEL


def _quota_spec(
    quotas: tuple[Quota, ...], units: Mapping[QuotaKey, GpuUnit]
) -> dict[str, dict[str, int | float]]:
    quota: dict[str, dict[str, int | float]] = {}
    for qt in quotas:
        unit = units.get(qt.flavor)

        def amount(n: int, unit: GpuUnit | None = unit) -> int | float:
            # a GPU unit's quota is written in GPUs, as in the policy
            if unit is None or n % unit.parts_per_gpu == 0:
                return n if unit is None else n // unit.parts_per_gpu
            return n / unit.parts_per_gpu

        entry = {"nominal": amount(qt.nominal)}
        if qt.borrowing_limit.most is not None:
            entry["borrowingLimit"] = amount(qt.borrowing_limit.most)
        if qt.lending_limit.most is not None:
            entry["lendingLimit"] = amount(qt.lending_limit.most)
        quota[qt.flavor] = entry
    return quota


def cohort_manifest(c: Cohort, units: Mapping[QuotaKey, GpuUnit]) -> dict[str, Any]:
    spec: dict[str, Any] = {"weight": c.weight_milli / 1000}
    if c.parent is not None:
        spec["parent"] = c.parent
    if c.quotas:
        spec["quota"] = _quota_spec(c.quotas, units)
    if c.description:
        spec["description"] = c.description
    if not c.reclaim_for_members:
        spec["reclaimForMembers"] = False
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Cohort",
        "metadata": {"name": c.name, "labels": {MANAGED_LABEL: "gpucarve"}},
        "spec": spec,
    }


def queue_manifest(q: Queue, units: Mapping[QuotaKey, GpuUnit]) -> dict[str, Any]:
    quota = _quota_spec(q.quotas, units)
    spec: dict[str, Any] = {
        "weight": q.weight_milli / 1000,
        "namespaces": list(q.namespaces),
        "quota": quota,
    }
    if q.cohort is not None:
        spec["cohort"] = q.cohort
    if q.max_per_workload:
        spec["maxPerWorkload"] = dict(q.max_per_workload)
    if q.allowed_priority_classes:
        spec["priorityClasses"] = list(q.allowed_priority_classes)
    if q.reclaim_wait_s is not None:
        spec["reclaimWaitSeconds"] = q.reclaim_wait_s
    if q.idleness is not None:
        spec["idleness"] = idleness_spec(q.idleness)
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Queue",
        "metadata": {"name": q.name, "labels": {MANAGED_LABEL: "gpucarve"}},
        "spec": spec,
    }


def priority_class_manifest(pc: PriorityClass) -> dict[str, Any]:
    """A scheduling.k8s.io PriorityClass. Whether gpucarve may evict its pods (`preemptible`) has
    no Kubernetes field (`preemptionPolicy` says whether its pods may evict others), so it
    travels as a label."""
    doc: dict[str, Any] = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {
            "name": pc.name,
            "labels": {
                MANAGED_LABEL: "gpucarve",
                PREEMPTIBLE_LABEL: "true" if pc.preemptible else "false",
            },
        },
        "value": pc.value,
        "globalDefault": pc.default,
    }
    if pc.description:
        doc["description"] = pc.description
    return doc


def policy_objects(policy: Policy) -> list[dict[str, Any]]:
    """Priority classes, then cohorts, then queues, each in name order."""
    return [
        *(priority_class_manifest(pc) for pc in sorted(policy.priority_classes, key=_name)),
        *(cohort_manifest(c, policy.units) for c in sorted(policy.cohorts, key=lambda c: c.name)),
        *(queue_manifest(q, policy.units) for q in sorted(policy.queues, key=lambda q: q.name)),
    ]


def _name(pc: PriorityClass) -> str:
    return pc.name


def queue_summary(obj: dict[str, Any]) -> dict[str, Any]:
    """The fields of a Queue object a person compares with the policy."""
    spec = obj.get("spec", {})
    return {
        "name": obj["metadata"]["name"],
        "cohort": spec.get("cohort"),
        "weight": spec.get("weight"),
        "quota": spec.get("quota", {}),
        "status": obj.get("status", {}),
    }


def idleness_spec(rule: IdleRule) -> dict[str, Any]:
    """A queue's idleness rule as the policy file writes it."""
    return {
        "activityBelow": rule.activity_below,
        "warnAfterSeconds": rule.warn_after_s,
        "reclaimAfterSeconds": rule.reclaim_after_s,
        "withinQuota": "reclaim" if rule.within_quota else "warn",
    }
