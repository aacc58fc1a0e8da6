"""Pod group objects as the scheduler reads them: gpucarve's PodGroup (`gpucarve.io/v1alpha1`),
the coscheduling plugin's (`scheduling.x-k8s.io/v1alpha1`, from kubernetes-sigs'
scheduler-plugins) and Kubernetes' own (`scheduling.k8s.io/v1beta1`, the Workload API's
runtime PodGroup), so gangs written for any of them keep their size.

A pod names its group by label (`gpucarve.io/pod-group` or `scheduling.x-k8s.io/pod-group`)
or, for Kubernetes' own, in `spec.schedulingGroup.podGroupName`; the group's object is the
PodGroup of that name in its namespace. Of the coscheduling spec gpucarve reads `minMember` and
`scheduleTimeoutSeconds`; `minResources` is not needed (the engine sums the pods' own
requests). Of Kubernetes' own it reads the gang policy's `minCount` (a `basic` policy starts
pods one by one: a minimum of one), `priorityClassName` and the topology constraint's key.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from gpucarve.core.policy import TopologyKeys
from gpucarve.core.problems import Problem
from gpucarve.core.vocabulary import HOSTNAME_LABEL
from gpucarve.kube.view.pods.group_spec import GroupSpec
from gpucarve.kube.view.pods.owners import positive_int

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


def resolve_topology(spec: GroupSpec, keys: TopologyKeys, gang: str) -> GroupSpec | Problem:
    """A Kubernetes PodGroup's topology keys as gpucarve's narrowest mode, by the policy's
    topology keys (and the hostname label for one node). A key the policy does not name is a
    problem, so the gang waits with that key named rather than being placed anywhere."""
    if not spec.topology_keys:
        return spec
    modes = {HOSTNAME_LABEL: "node", keys.nvlink_domain: "nvlink", keys.rack: "rack",
             keys.block: "block"}  # fmt: skip
    unknown = [k for k in spec.topology_keys if k not in modes]
    if unknown:
        return Problem(
            (gang, "schedulingConstraints", "topology", "key"),
            "unknown-topology-key",
            f"the PodGroup's topology key {unknown[0]!r} is no topology key of the policy",
            f"use one of {', '.join(repr(k) for k in modes)} (the policy's topologyKeys name "
            "the node labels of NVLink domains, racks and blocks)",
        )
    found = min((modes[k] for k in spec.topology_keys), key=TOPOLOGIES.index)
    return dataclasses.replace(spec, topology=found, topology_keys=())


def workload_api_specs(objs: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], GroupSpec]:
    """(namespace, name) -> what each of Kubernetes' own PodGroups asks."""
    out: dict[tuple[str, str], GroupSpec] = {}
    for obj in objs:
        meta, spec = obj["metadata"], obj.get("spec") or {}
        gang = (spec.get("schedulingPolicy") or {}).get("gang")
        size = positive_int((gang or {}).get("minCount")) if isinstance(gang, Mapping) else None
        constraints = (spec.get("schedulingConstraints") or {}).get("topology") or []
        out[(meta["namespace"], meta["name"])] = GroupSpec(
            min_member=size or 1,
            priority_class=spec.get("priorityClassName") or None,
            topology_keys=tuple(
                str(c.get("key", "")) for c in constraints if isinstance(c, Mapping)
            ),
        )
    return out
