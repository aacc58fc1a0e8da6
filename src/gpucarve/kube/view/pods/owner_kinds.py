"""The kinds of object that make pods a gang, as one registry.

Each entry says how a pod shows that it belongs to a gang of that kind (labels, annotations,
owner references: `gang_of`), which objects the scheduler watches to learn the gang's size
(`watch`, with the RBAC rule that needs), and how it reads them (`specs`). The scheduler builds
its informers from this registry, `explain` lists the same objects, and a test holds the Helm
chart's ClusterRole equal to `rbac_rules()`. Adding a kind (a Volcano Job, say) is adding an
entry; `tests/unit/kube/view/test_owner_kinds.py` shows one added that way.

Order matters: the first kind whose `gang_of` answers names the gang; a pod annotated
`gpucarve.io/gang: "false"` is a workload of its own for every kind that `honours_opt_out` (a
pod group label is an explicit choice and wins). Where two kinds' objects give the same gang a
spec, the one earlier in the registry wins (gpucarve's PodGroup over coscheduling's over
Kubernetes' own over Jobs).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpucarve.core.vocabulary import (
    COSCHEDULING_GROUP,
    COSCHEDULING_GROUP_LABEL,
    COSCHEDULING_VERSION,
    GANG_ANNOTATION,
    GROUP,
    POD_GROUP_LABEL,
    VERSION,
    WORKLOAD_API_GROUP,
    WORKLOAD_API_VERSION,
)
from gpucarve.kube.view.pods import owners
from gpucarve.kube.view.pods.group_spec import GroupSpec
from gpucarve.kube.view.pods.pod_groups import group_specs, workload_api_specs

Meta = Mapping[str, Any]
GangKey = tuple[str, str]  # (namespace, gang name)
# (labels, annotations, metadata, spec) -> (gang name, size its labels say or None) or None
GangOf = Callable[[Meta, Meta, Meta, Meta], tuple[str, int | None] | None]
Specs = Callable[[Iterable[Meta]], dict[GangKey, GroupSpec]]


@dataclass(frozen=True)
class Watched:
    """Objects the scheduler lists and watches for a kind's gang sizes."""

    group: str  # "" for the core API group
    version: str
    resource: str
    # A custom resource is read where its CRD is installed; a built-in one always is.
    crd: bool = True
    # True: the scheduler warns at start when the CRD is not installed (gpucarve's own);
    # False: skipped quietly where it is not
    expected: bool = False

    @property
    def path(self) -> str:
        if not self.group:
            return f"/api/{self.version}/{self.resource}"
        return f"/apis/{self.group}/{self.version}/{self.resource}"


@dataclass(frozen=True)
class OwnerKind:
    name: str
    gang_of: GangOf
    honours_opt_out: bool = True
    watch: Watched | None = None
    specs: Specs | None = None
    # its pods wait for the kind's object (the gang's size), as that kind's own scheduler
    # makes them: never placed as a gang of whatever pods exist so far
    awaits_object: bool = False


def _label(key: str, prefix: str = "") -> GangOf:
    def gang_of(
        labels: Meta, annotations: Meta, meta: Meta, spec: Meta
    ) -> tuple[str, int | None] | None:
        value = labels.get(key)
        return (f"{prefix}{value}", None) if value else None

    return gang_of


def _scheduling_group(
    labels: Meta, annotations: Meta, meta: Meta, spec: Meta
) -> tuple[str, int | None] | None:
    group = spec.get("schedulingGroup")
    name = group.get("podGroupName") if isinstance(group, Mapping) else None
    return (name, None) if isinstance(name, str) and name else None


def _lws(labels: Meta, annotations: Meta, meta: Meta, spec: Meta) -> tuple[str, int | None] | None:
    name, index = labels.get(owners.LWS_NAME_LABEL), labels.get(owners.LWS_GROUP_LABEL)
    if not name or index is None:
        return None
    return f"lws-{name}-{index}", owners.positive_int(annotations.get(owners.LWS_SIZE_ANNOTATION))


def _job(labels: Meta, annotations: Meta, meta: Meta, spec: Meta) -> tuple[str, int | None] | None:
    name = owners.owned_by_job(meta)
    if name is not None and any(labels.get(k) == name for k in owners.JOB_NAME_LABELS):
        return f"job-{name}", None
    return None


def _ours(objs: Iterable[Meta]) -> dict[GangKey, GroupSpec]:
    return group_specs(objs, ours=True)


def _coscheduling(objs: Iterable[Meta]) -> dict[GangKey, GroupSpec]:
    return group_specs(objs, ours=False)


POD_GROUPS = "PodGroup"  # gpucarve's own: the scheduler also writes their status
WORKLOAD_API = "Workload API PodGroup"  # Kubernetes' own (scheduling.k8s.io)

OWNER_KINDS: tuple[OwnerKind, ...] = (
    OwnerKind(
        POD_GROUPS,
        _label(POD_GROUP_LABEL),
        honours_opt_out=False,
        watch=Watched(GROUP, VERSION, "podgroups", expected=True),
        specs=_ours,
    ),
    OwnerKind(
        "coscheduling PodGroup",
        _label(COSCHEDULING_GROUP_LABEL),
        honours_opt_out=False,
        watch=Watched(COSCHEDULING_GROUP, COSCHEDULING_VERSION, "podgroups"),
        specs=_coscheduling,
        awaits_object=True,
    ),
    OwnerKind(
        WORKLOAD_API,
        _scheduling_group,
        honours_opt_out=False,
        # built in, but served only where the API server enables the beta API
        watch=Watched(WORKLOAD_API_GROUP, WORKLOAD_API_VERSION, "podgroups"),
        specs=workload_api_specs,
        awaits_object=True,
    ),
    OwnerKind("LeaderWorkerSet", _lws),
    # a JobSet's size is the sum of its Jobs': read with the Jobs (below)
    OwnerKind("JobSet", _label(owners.JOBSET_LABEL, "jobset-")),
    OwnerKind("Kubeflow training job", _label(owners.KUBEFLOW_LABEL)),
    OwnerKind("RayCluster", _label(owners.RAY_CLUSTER_LABEL, "raycluster-")),
    OwnerKind("Job", _job, watch=Watched("batch", "v1", "jobs", crd=False), specs=owners.job_specs),
)


def group_of(
    meta: Meta, kinds: Sequence[OwnerKind] = OWNER_KINDS, spec: Meta | None = None
) -> tuple[str, int | None] | None:
    """The gang a pod (its metadata, and its spec where a kind reads it) belongs to, and the
    size its labels say (None: from the gang's object, or all its pods); None for a pod that
    is a workload of its own."""
    found = gang_and_kind(meta, kinds, spec)
    return None if found is None else found[0]


def gang_and_kind(
    meta: Meta, kinds: Sequence[OwnerKind] = OWNER_KINDS, spec: Meta | None = None
) -> tuple[tuple[str, int | None], OwnerKind] | None:
    """`group_of`, with the kind that named the gang."""
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    opted_out = str(annotations.get(GANG_ANNOTATION, "")).lower() == "false"
    for kind in kinds:
        if opted_out and kind.honours_opt_out:
            continue
        found = kind.gang_of(labels, annotations, meta, spec or {})
        if found is not None:
            return found, kind
    return None


# A creation stamp is a whole second and the scheduler's epoch is not: a pod `created` second
# n (rounded down from the epoch) was made before a look at second `looked` for certain only
# from n + 2 on; nearer, it may have come after the look, with the CRD it belongs to.
STAMP_SLACK_S = 2


def awaited_object(
    pod: Meta,
    specs: Mapping[GangKey, GroupSpec],
    unread: Mapping[str, int],
    created: int,
    kinds: Sequence[OwnerKind] = OWNER_KINDS,
) -> tuple[str, str] | None:
    """(kind name, why the pod waits) for a pod of a gang whose kind waits for its object,
    that kind's objects unread (its CRD not served when last looked for, at `unread[kind]`),
    and the pod made since that look (`created`, on the same clock): the CRD may have come
    with it, so the gang waits for the next look instead of running as the pods that exist so
    far. None otherwise (a pod made before a look that found no CRD is a gang of all its pods,
    as without an object)."""
    meta = pod["metadata"]
    found = gang_and_kind(meta, kinds, pod.get("spec"))
    if found is None or not found[1].awaits_object:
        return None
    (gang, _), kind = found
    looked = unread.get(kind.name)
    if looked is None or created + STAMP_SLACK_S <= looked or (meta["namespace"], gang) in specs:
        return None
    return kind.name, (
        f"pod-group/awaited: waiting for the scheduler to look for the {kind.name} CRD "
        f"({meta['namespace']}/{gang} may be one): a gang of that kind starts only once its "
        "object says how many start together"
    )


def all_specs(
    objects: Mapping[str, Iterable[Meta]], kinds: Sequence[OwnerKind] = OWNER_KINDS
) -> dict[GangKey, GroupSpec]:
    """Every gang's spec from the watched objects (kind name -> its objects; a kind missing
    from `objects` is not served); where two kinds name one gang, the earlier kind wins."""
    out: dict[GangKey, GroupSpec] = {}
    for kind in reversed(kinds):
        if kind.specs is not None and kind.name in objects:
            out.update(kind.specs(objects[kind.name]))
    return out


def watched(kinds: Sequence[OwnerKind] = OWNER_KINDS) -> list[tuple[str, Watched]]:
    return [(k.name, k.watch) for k in kinds if k.watch is not None]


def rbac_rules(kinds: Sequence[OwnerKind] = OWNER_KINDS) -> set[tuple[str, str, str]]:
    """(API group, resource, verb) the scheduler needs to read the kinds' objects."""
    return {(w.group, w.resource, verb) for _, w in watched(kinds) for verb in ("list", "watch")}
