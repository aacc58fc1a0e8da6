"""Workload documents (YAML, JSON, trace rows) to validated `Workload`s.

The document mirrors what a Kubernetes user writes: per pod set a count and minimum, resource
requests and limits with the device plugin's names, gpucarve's fraction annotations, a node
selector, required affinity expressions and tolerations. Errors carry the same path / code /
message / fix as the policy's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpucarve.config.device_claims import DeviceClaimSpec, claim_request
from gpucarve.config.device_select import Device
from gpucarve.config.pydantic_errors import problems_from
from gpucarve.core.amounts import FlavorName, ProfileName
from gpucarve.core.policy import Policy
from gpucarve.core.problems import InvalidInput, Path, Problem, format_path
from gpucarve.core.quantity import QuantityError, cpu_milli, memory_mib, whole_count, whole_number
from gpucarve.core.requests import candidate_flavors, gpu_memory_of, slices_per_pod
from gpucarve.core.vocabulary import (
    FRACTION_ANNOTATION,
    FRACTION_LIMIT_ANNOTATION,
    KUEUE_QUEUE_LABEL,
    MEMORY_ANNOTATION,
    MEMORY_LIMIT_ANNOTATION,
    QUEUE_LABEL,
)
from gpucarve.core.workload import (
    GpuKind,
    GpuRequest,
    LabelRequirement,
    Operator,
    PodSet,
    Toleration,
    TopologyMode,
    Workload,
)

_NAME = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class ResourcesSpec(_Strict):
    requests: dict[str, str | int] = {}
    limits: dict[str, str | int] = {}


class RequirementSpec(_Strict):
    key: str = Field(min_length=1)
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: list[str] = []


class PreferredSpec(_Strict):
    weight: int = Field(ge=1, le=100)
    preference: list[RequirementSpec] = Field(min_length=1)


class TolerationSpec(_Strict):
    key: str = ""
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str = ""
    effect: Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"] = ""


class PodSetSpec(_Strict):
    name: str = Field(default="main", pattern=_NAME, max_length=63)
    count: int = Field(default=1, ge=1, le=100_000)
    minCount: int | None = Field(default=None, ge=1, le=100_000)
    resources: ResourcesSpec = ResourcesSpec()
    annotations: dict[str, str] = {}
    nodeSelector: dict[str, str] = {}
    # required node affinity: `affinity` is one term (its expressions ANDed); `affinityTerms`
    # are several, ORed, as Kubernetes' nodeSelectorTerms
    affinity: list[RequirementSpec] = []
    affinityTerms: list[list[RequirementSpec]] = Field(default=[], max_length=64)
    # preferredDuringScheduling: weighted terms, the nodes matching the most weight first
    preferredAffinity: list[PreferredSpec] = Field(default=[], max_length=64)
    tolerations: list[TolerationSpec] = []
    # what the pods' ResourceClaims ask for (Dynamic Resource Allocation)
    deviceClaims: list[DeviceClaimSpec] = Field(default=[], max_length=16)


class WorkloadSpec(_Strict):
    name: str = Field(pattern=_NAME, max_length=253)
    namespace: str = Field(pattern=_NAME, max_length=63)
    queue: str | None = None
    labels: dict[str, str] = {}
    priorityClass: str | None = None
    submitTime: int = Field(default=0, ge=0, le=10**10)  # seconds: three centuries
    duration: int | None = Field(default=None, ge=1, le=10**9)
    topology: Literal["none", "node", "nvlink", "rack", "block"] = "none"
    # How long a gang may stay in part placed (some pods running, the rest waiting) before
    # what it holds is released; default by size (engine.gang_timeout).
    scheduleTimeoutSeconds: int | None = Field(default=None, ge=1, le=7 * 86400)
    # How long it says it runs once started: a claim, which may only lengthen what finished
    # work of its kind took (core.runtime).
    expectedRuntimeSeconds: int | None = Field(default=None, ge=1, le=365 * 86400)
    # Seconds after which it is stopped once started (a pod's activeDeadlineSeconds): it ends
    # by then, so reservations let it backfill by it.
    activeDeadlineSeconds: int | None = Field(default=None, ge=1, le=365 * 86400)
    # Whether an eviction puts it back in its queue (a controller makes its pods again; the
    # simulator requeues it). false: evicted, it is gone (bare pods), so it is never moved.
    restartable: bool = True
    podSets: list[PodSetSpec] = Field(min_length=1, max_length=8)


GPU_RESOURCE = "nvidia.com/gpu"
SHARED_RESOURCE = "nvidia.com/gpu.shared"
MIG_PREFIX = "nvidia.com/mig-"


def _resource_to_request(name: str, count: int) -> GpuRequest:
    if name == GPU_RESOURCE:
        return GpuRequest(GpuKind.WHOLE, count)
    if name == SHARED_RESOURCE:
        return GpuRequest(GpuKind.SHARED, count)
    profile = name.removeprefix(MIG_PREFIX)
    # The device plugin writes `+me` as `.me` in resource names.
    if profile.endswith(".me"):
        profile = profile[: -len(".me")] + "+me"
    return GpuRequest(GpuKind.MIG, count, profile=ProfileName(profile))


def _annotation_number(raw: str, maximum: int) -> int:
    """The annotation's whole number, or 0 (refused by the caller) if it is not one."""
    try:
        return whole_number(raw, "the annotation", maximum)
    except QuantityError:
        return 0


def _resource_requests(ps: PodSetSpec, rpath: Path, problems: list[Problem]) -> list[GpuRequest]:
    """The pod set's nvidia.com/* resources as requests; what is wrong goes to `problems`."""
    names = sorted(
        {k for k in (*ps.resources.requests, *ps.resources.limits) if k.startswith("nvidia.com/")}
    )
    requests: list[GpuRequest] = []
    for name in names:
        if name not in (GPU_RESOURCE, SHARED_RESOURCE) and not name.startswith(MIG_PREFIX):
            problems.append(
                Problem(
                    (*rpath, "limits", name),
                    "unknown-resource",
                    f"{name!r} is not a resource gpucarve schedules",
                    f"use {GPU_RESOURCE}, {SHARED_RESOURCE} or {MIG_PREFIX}<profile>",
                )
            )
            continue
        req, lim = ps.resources.requests.get(name), ps.resources.limits.get(name)
        if lim is None:
            problems.append(
                Problem(
                    (*rpath, "requests", name),
                    "request-without-limit",
                    f"{name} has a request but no limit; Kubernetes needs a limit for GPUs",
                    f"add `limits: {{{name}: {req}}}` (a limit alone is enough)",
                )
            )
            continue
        try:
            lim_n = whole_count(lim)
            req_n = lim_n if req is None else whole_count(req)
        except QuantityError as exc:
            problems.append(
                Problem((*rpath, "limits", name), "bad-quantity", str(exc), "use 1, 2, 4…")
            )
            continue
        if req_n != lim_n:
            problems.append(
                Problem(
                    (*rpath, "requests", name),
                    "request-not-limit",
                    f"{name}: request {req_n} ≠ limit {lim_n}; GPUs cannot be overcommitted",
                    f"set both to the same value, e.g. {lim_n}",
                )
            )
            continue
        if lim_n == 0:
            continue
        requests.append(_resource_to_request(name, lim_n))
    return requests


def _fraction(
    ps: PodSetSpec, apath: Path, policy: Policy, problems: list[Problem]
) -> tuple[int, int]:
    """milli-GPU and MiB of one GPU from the gpucarve.io/gpu-* annotations (0: not asked or
    invalid; what is wrong goes to `problems`)."""
    frac_raw = ps.annotations.get(FRACTION_ANNOTATION)
    mem_raw = ps.annotations.get(MEMORY_ANNOTATION)
    milli, mem = 0, 0
    if frac_raw is not None:
        milli = _annotation_number(frac_raw, 1000)
        if not 1 <= milli <= 1000:
            problems.append(
                Problem(
                    (*apath, FRACTION_ANNOTATION),
                    "bad-fraction",
                    f"{FRACTION_ANNOTATION} is {frac_raw!r}: it is in milli-GPU, 1..1000",
                    'write e.g. "500" for half a GPU (whole GPUs: request nvidia.com/gpu)',
                )
            )
            milli = 0
    if mem_raw is not None:
        mem = _annotation_number(mem_raw, 10**12)
        if mem < 1:
            problems.append(
                Problem(
                    (*apath, MEMORY_ANNOTATION),
                    "bad-gpu-memory",
                    f"{MEMORY_ANNOTATION} is {mem_raw!r}: it is a positive number of MiB",
                    'write e.g. "20480" for 20 GiB',
                )
            )
            mem = 0
        else:
            largest = max((p.model.memory_mib for p in policy.pools), default=0)
            if mem > largest:
                problems.append(
                    Problem(
                        (*apath, MEMORY_ANNOTATION),
                        "gpu-memory-too-large",
                        f"{mem} MiB is more than any GPU of the policy has ({largest} MiB)",
                        "ask for less, or whole GPUs",
                    )
                )
    return milli, mem


def _limit_alone(apath: Path) -> Problem:
    return Problem(
        apath,
        "limit-without-request",
        f"{FRACTION_LIMIT_ANNOTATION} or {MEMORY_LIMIT_ANNOTATION} without the request it "
        "raises: a fraction is admitted and charged by its request",
        f"add {FRACTION_ANNOTATION} (and {MEMORY_ANNOTATION} for memory) at or below the limit",
    )


def _limits(
    ps: PodSetSpec, apath: Path, asked: tuple[int, int], largest_mib: int, problems: list[Problem]
) -> tuple[int, int]:
    """A fraction's limits above its request (0: none), from the *-limit annotations; memory
    at most the largest GPU of the policy."""
    out = []
    milli, mem = asked
    for key, request, most, what in (
        (FRACTION_LIMIT_ANNOTATION, milli, 1000, "milli-GPU"),
        (MEMORY_LIMIT_ANNOTATION, mem, largest_mib, "MiB"),
    ):
        raw = ps.annotations.get(key)
        if raw is None:
            out.append(0)
            continue
        limit = _annotation_number(raw, 10**12)
        if not request or not request <= limit <= most:
            problems.append(
                Problem(
                    (*apath, key),
                    "bad-fraction-limit",
                    f"{key} is {raw!r}: it is in {what}, at least the request "
                    f"({request or 'none asked'}) and at most {most}",
                    f"set it between the request and {most}, or drop it (no burst)",
                )
            )
            out.append(0)
            continue
        out.append(0 if limit == request else limit)
    return out[0], out[1]


Devices = Mapping[FlavorName, Sequence[Device]]


def _gpu_request(
    ps: PodSetSpec, path: Path, policy: Policy, devices: Devices | None
) -> tuple[GpuRequest, list[Problem]]:
    problems: list[Problem] = []
    rpath = (*path, "resources")
    requests = _resource_requests(ps, rpath, problems)
    if ps.deviceClaims:
        claimed, probs = claim_request(ps.deviceClaims, path, policy, devices)
        problems += probs
        if requests:
            problems.append(
                Problem(
                    (*path, "deviceClaims"),
                    "claims-with-resources",
                    "a pod asks for GPUs both through ResourceClaims and as "
                    + ", ".join(r.describe() for r in requests),
                    "ask for its GPUs one way: a ResourceClaim or an nvidia.com/* limit",
                )
            )
        elif claimed is not None:
            requests.append(claimed)
    if FRACTION_ANNOTATION in ps.annotations or MEMORY_ANNOTATION in ps.annotations:
        apath = (*path, "annotations")
        milli, mem = _fraction(ps, apath, policy, problems)
        if requests:
            problems.append(
                Problem(
                    apath,
                    "fraction-with-gpu",
                    "a fractional request cannot be combined with nvidia.com/* resources",
                    "use either the gpucarve.io/gpu-* annotations or a GPU resource",
                )
            )
        elif milli or mem:
            largest = max((p.model.memory_mib for p in policy.pools), default=0)
            up, mem_up = _limits(ps, apath, (milli, mem), largest, problems)
            requests.append(
                GpuRequest(
                    GpuKind.FRACTION, 1, milli=milli, memory_mib=mem, milli_limit=up,
                    memory_limit_mib=mem_up,
                )
            )  # fmt: skip
    elif FRACTION_LIMIT_ANNOTATION in ps.annotations or MEMORY_LIMIT_ANNOTATION in ps.annotations:
        problems.append(_limit_alone((*path, "annotations")))
    if len(requests) > 1:
        problems.append(
            Problem(
                rpath,
                "several-gpu-kinds",
                "a pod asks for more than one kind of GPU resource: "
                + ", ".join(r.describe() for r in requests),
                "ask for one kind per pod set (split into pod sets)",
            )
        )
    if problems:
        return GpuRequest(), problems
    return (requests[0] if requests else GpuRequest()), []


def _may_use(policy: Policy, queue: str, namespace: str) -> bool:
    return any(q.name == queue and namespace in q.namespaces for q in policy.queues)


def _queue_name(spec: WorkloadSpec, policy: Policy, path: Path) -> tuple[str | None, list[Problem]]:
    explicit = spec.queue or spec.labels.get(QUEUE_LABEL) or spec.labels.get(KUEUE_QUEUE_LABEL)
    names = [q.name for q in policy.queues]
    if explicit is not None:
        if explicit not in names:
            return None, [
                Problem(
                    (*path, "queue"),
                    "unknown-queue",
                    f"queue {explicit!r} does not exist",
                    f"use one of: {', '.join(names) or '(the policy has no queues)'}",
                )
            ]
        label = QUEUE_LABEL if spec.labels.get(QUEUE_LABEL) else KUEUE_QUEUE_LABEL
        if spec.queue is None and not _may_use(policy, explicit, spec.namespace):
            # A label is written by the tenant: like Kueue's namespaced LocalQueues, it may
            # only pick among the queues that list the namespace, or any team could charge
            # its work to another's quota.
            own = [q.name for q in policy.queues if spec.namespace in q.namespaces]
            return None, [
                Problem(
                    (*path, "labels", label),
                    "queue-not-for-namespace",
                    f"namespace {spec.namespace!r} may not use queue {explicit!r}",
                    f"remove the {label} label (the namespace's queue: "
                    f"{', '.join(own) or 'none'}), or add {spec.namespace!r} to queue "
                    f"{explicit!r}'s namespaces",
                )
            ]
        return explicit, []
    for q in policy.queues:
        if spec.namespace in q.namespaces:
            return q.name, []
    return None, [
        Problem(
            (*path, "namespace"),
            "no-queue",
            f"namespace {spec.namespace!r} belongs to no queue and no queue is named",
            f"set `queue:` or the {QUEUE_LABEL} label, or add the namespace to a queue",
        )
    ]


def _priority(
    spec: WorkloadSpec, policy: Policy, queue: str | None, path: Path
) -> tuple[str, int, bool, list[Problem]]:
    classes = {c.name: c for c in policy.priority_classes}
    name = spec.priorityClass
    if name is None:
        default = next((c for c in policy.priority_classes if c.default), None)
        if default is None:
            return "", 0, True, []
        name = default.name
    cls = classes.get(name)
    if cls is None:
        return (
            name,
            0,
            True,
            [
                Problem(
                    (*path, "priorityClass"),
                    "unknown-priority-class",
                    f"priority class {name!r} is not defined",
                    f"use one of: {', '.join(classes) or '(none defined)'}",
                )
            ],
        )
    allowed = policy.queue(queue).allowed_priority_classes if queue else ()
    if allowed and name not in allowed:
        return (
            name,
            cls.value,
            cls.preemptible,
            [
                Problem(
                    (*path, "priorityClass"),
                    "priority-class-not-allowed",
                    f"queue {queue} does not allow priority class {name!r}",
                    f"use one of: {', '.join(allowed)}",
                )
            ],
        )
    return name, cls.value, cls.preemptible, []


def _requirement(a: RequirementSpec) -> LabelRequirement:
    return LabelRequirement(a.key, Operator(a.operator), tuple(a.values))


def _terms(ps: PodSetSpec) -> list[list[RequirementSpec]]:
    return [ps.affinity] if ps.affinity else list(ps.affinityTerms)


def _affinity_problems(ps: PodSetSpec, path: Path) -> list[Problem]:
    """The rules Kubernetes gives node affinity expressions, and one way of writing terms."""
    if ps.affinity and ps.affinityTerms:
        return [Problem((*path, "affinityTerms"), "affinity-twice",
                        "both `affinity` (one term) and `affinityTerms` (several) are set",
                        "put the expressions of `affinity` into each of `affinityTerms`, or "
                        "keep one of the two")]  # fmt: skip
    out: list[Problem] = []
    where = "affinity" if ps.affinity else "affinityTerms"
    located = [
        ((*path, where, i) if ps.affinity else (*path, where, t, i), req)
        for t, term in enumerate(_terms(ps))
        for i, req in enumerate(term)
    ]
    located += [
        ((*path, "preferredAffinity", t, "preference", i), req)
        for t, p in enumerate(ps.preferredAffinity)
        for i, req in enumerate(p.preference)
    ]
    for at, req in located:
        out += _expression_problems(at, req)
    return out


def _expression_problems(at: Path, req: RequirementSpec) -> list[Problem]:
    if req.operator in ("Gt", "Lt") and (len(req.values) != 1 or not _whole(req.values[0])):
        return [Problem((*at, "values"), "bad-affinity",
                        f"{req.operator} takes exactly one whole number, got {req.values}",
                        'write e.g. values: ["40000"]')]  # fmt: skip
    if req.operator in ("In", "NotIn") and not req.values:
        return [Problem((*at, "values"), "bad-affinity",
                        f"{req.operator} needs at least one value",
                        "list the values, or use Exists / DoesNotExist")]  # fmt: skip
    if req.operator in ("Exists", "DoesNotExist") and req.values:
        return [Problem((*at, "values"), "bad-affinity", f"{req.operator} takes no values",
                        "remove values")]  # fmt: skip
    return []


def _whole(text: str) -> bool:
    body = text[1:] if text[:1] in "+-" else text
    return body.isascii() and body.isdigit() and len(body) <= 18


def _pod_set(
    ps: PodSetSpec, path: Path, policy: Policy, devices: Devices | None = None
) -> tuple[PodSet | None, list[Problem]]:
    gpu, problems = _gpu_request(ps, path, policy, devices)
    problems += _affinity_problems(ps, path)
    cpu = mem = 0
    rpath = (*path, "resources", "requests")
    try:
        cpu = cpu_milli(ps.resources.requests.get("cpu", 0))
    except QuantityError as exc:
        problems.append(Problem((*rpath, "cpu"), "bad-quantity", str(exc), "write e.g. 4 or 500m"))
    try:
        mem = memory_mib(ps.resources.requests.get("memory", 0))
    except QuantityError as exc:
        problems.append(Problem((*rpath, "memory"), "bad-quantity", str(exc), "write e.g. 16Gi"))
    if ps.minCount is not None and ps.minCount > ps.count:
        problems.append(
            Problem(
                (*path, "minCount"),
                "out-of-range",
                f"minCount {ps.minCount} exceeds count {ps.count}",
                f"use minCount ≤ {ps.count}",
            )
        )
    if not problems and gpu.kind is not GpuKind.NONE and not candidate_flavors(policy, gpu):
        problems.append(
            Problem(
                (*path, "resources"),
                "no-flavor-serves",
                f"no pool of the policy serves {gpu.describe()}",
                _no_flavor_fix(policy, gpu),
            )
        )
    if problems:
        return None, problems
    return (
        PodSet(
            name=ps.name,
            count=ps.count,
            min_count=ps.minCount or ps.count,
            gpu=gpu,
            cpu_milli=cpu,
            memory_mib=mem,
            node_selector=tuple(sorted(ps.nodeSelector.items())),
            affinity=tuple(tuple(_requirement(a) for a in term) for term in _terms(ps)),
            tolerations=tuple(
                Toleration(t.key, t.operator, t.value, t.effect) for t in ps.tolerations
            ),
            preferred=tuple(
                (p.weight, tuple(_requirement(a) for a in p.preference))
                for p in ps.preferredAffinity
            ),
        ),
        [],
    )


def _no_flavor_fix(policy: Policy, gpu: GpuRequest) -> str:
    plain = [f.name for f in policy.flavors.values() if f.unrenamed]
    if gpu.kind is GpuKind.SHARED and plain:
        return (
            f"{', '.join(plain)} publish replicas as nvidia.com/gpu (renameByDefault: false): "
            "ask for nvidia.com/gpu"
        )
    return "flavors: " + ", ".join(policy.flavors) if policy.flavors else "add a pool"


def _max_per_workload(w: Workload, policy: Policy, path: Path) -> list[Problem]:
    queue = policy.queue(w.queue)
    limits = dict(queue.max_per_workload)
    out: list[Problem] = []
    for i, ps in enumerate(w.pod_sets):
        flavors = [f for f in candidate_flavors(policy, ps.gpu) if policy.quota_keys(queue, f.name)]
        if not flavors:
            continue
        need = {
            f.name: slices_per_pod(ps.gpu, f, gpu_memory_of(policy, f)) * ps.min_count
            for f in flavors
        }
        if all(f.name in limits and need[f.name] > limits[f.name] for f in flavors):
            shown = ", ".join(f"{n} {need[n]} > {limits[n]}" for n in need)
            out.append(
                Problem(
                    (*path, "podSets", i, "count"),
                    "exceeds-max-per-workload",
                    f"queue {queue.name} allows at most {shown} per workload",
                    "split the workload or ask the platform team to raise maxPerWorkload",
                )
            )
    return out


def build_workload(
    data: Any, policy: Policy, path: Path = (), devices: Devices | None = None
) -> tuple[Workload | None, list[Problem]]:
    """`devices`: each DRA flavor's devices as the cluster publishes them, for the selectors
    of `deviceClaims` (None: as the catalog describes them)."""
    try:
        spec = WorkloadSpec.model_validate(data)
    except ValidationError as exc:
        return None, problems_from(exc, WorkloadSpec, path)
    queue, problems = _queue_name(spec, policy, path)
    cls, priority, preemptible, probs = _priority(spec, policy, queue, path)
    problems += probs
    pod_sets: list[PodSet] = []
    names: set[str] = set()
    for i, ps in enumerate(spec.podSets):
        if ps.name in names:
            problems.append(
                Problem(
                    (*path, "podSets", i, "name"),
                    "duplicate-pod-set",
                    f"pod set {ps.name!r} twice",
                    "rename one",
                )
            )
        names.add(ps.name)
        built, probs = _pod_set(ps, (*path, "podSets", i), policy, devices)
        problems += probs
        if built is not None:
            pod_sets.append(built)
    if problems or queue is None:
        return None, problems
    w = Workload(
        id=f"{spec.namespace}/{spec.name}",
        queue=queue,
        priority_class=cls,
        priority=priority,
        preemptible=preemptible,
        pod_sets=tuple(pod_sets),
        submit_time=spec.submitTime,
        topology=TopologyMode(spec.topology),
        duration=spec.duration,
        timeout_s=spec.scheduleTimeoutSeconds,
        expected_runtime_s=spec.expectedRuntimeSeconds,
        runtime_limit_s=spec.activeDeadlineSeconds,
        restartable=spec.restartable,
    )
    problems = _max_per_workload(w, policy, path)
    return (None if problems else w), problems


def build_workloads(
    items: Sequence[Mapping[str, Any]], policy: Policy, source: str, prefix: Path = ()
) -> list[Workload]:
    """Build a list of workloads; raise `InvalidInput` with every problem if any is bad."""
    out: list[Workload] = []
    problems: list[Problem] = []
    ids: dict[str, int] = {}
    for i, item in enumerate(items):
        w, probs = build_workload(item, policy, (*prefix, i))
        problems += probs
        if w is not None:
            if w.id in ids:
                first = format_path((*prefix, ids[w.id]))
                problems.append(
                    Problem(
                        (*prefix, i, "name"),
                        "duplicate-workload",
                        f"workload {w.id} appears twice (first as {first})",
                        "give each workload of a namespace its own name",
                    )
                )
            ids.setdefault(w.id, i)
            out.append(w)
    if problems:
        raise InvalidInput(source, problems)
    return out
