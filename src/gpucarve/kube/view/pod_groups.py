"""Pod group objects as the scheduler reads them: gpucarve's PodGroup (`gpucarve.io/v1alpha1`)
and the coscheduling plugin's (`scheduling.x-k8s.io/v1alpha1`, from kubernetes-sigs'
scheduler-plugins), so gangs written for either keep their `minMember` and timeout.

A pod names its group by label (`gpucarve.io/pod-group` or `scheduling.x-k8s.io/pod-group`);
the group's object is the PodGroup of that name in its namespace, of either kind. Of the
coscheduling spec gpucarve reads `minMember` and `scheduleTimeoutSeconds`; `minResources` is
not needed (the engine sums the pods' own requests).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpucarve.kube.view.group_spec import GroupSpec
from gpucarve.kube.view.owners import positive_int

TOPOLOGIES = ("none", "node", "nvlink", "rack", "block")


def _spec(obj: Mapping[str, Any], ours: bool) -> GroupSpec:
    spec = obj.get("spec") or {}
    topology = spec.get("topology", "none") if ours else "none"
    return GroupSpec(
        min_member=positive_int(spec.get("minMember")) or 1,
        topology=topology if topology in TOPOLOGIES else "none",
        timeout_s=positive_int(spec.get("scheduleTimeoutSeconds")),
        queue=(spec.get("queue") or None) if ours else None,
        priority_class=(spec.get("priorityClassName") or None) if ours else None,
    )


def group_specs(objs: Iterable[Mapping[str, Any]], ours: bool) -> dict[tuple[str, str], GroupSpec]:
    """(namespace, name) -> what each group's object asks: gpucarve's PodGroups (`ours`) or
    coscheduling's. Where both kinds share a name, gpucarve's is read (`owner_kinds`): it can
    say more (topology, queue, priority class)."""
    out: dict[tuple[str, str], GroupSpec] = {}
    for obj in objs:
        meta = obj["metadata"]
        out[(meta["namespace"], meta["name"])] = _spec(obj, ours=ours)
    return out
