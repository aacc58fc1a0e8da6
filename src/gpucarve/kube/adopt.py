"""A live cluster read into a policy (`gpucarve adopt`): the inverse of the scheduler's view.

Nodes become pools by what GPU Feature Discovery and the device plugin say of them: the model
(`nvidia.com/gpu.product`, mapped to the catalog; `<product>-MIG-<profile>` under the single MIG
strategy), GPUs per node (`nvidia.com/gpu.count`), the sharing mode (`nvidia.com/mig-*`
resources: MIG, with the layout their counts imply; `nvidia.com/gpu.sharing-strategy` or
`nvidia.com/gpu.shared`: time-slicing or MPS with `nvidia.com/gpu.replicas`, renamed or not;
else exclusive) and the node's CPU and memory. A node whose GPUs NVIDIA's DRA driver publishes
in ResourceSlices (no `nvidia.com/*` resource) is read from its devices: whole GPUs or MIG
devices, the model from GFD's label or the devices' product name; it becomes a `devices: dra`
pool. Nodes alike in all of that are one pool, which selects them by the labels that tell them
apart. ResourceQuotas become queues (their GPU hard
limits nominal quota of the flavor publishing the resource: `config.quota_import`), and
PriorityClasses priority classes. Pure: objects in, a policy document and a report out; nothing
in the cluster is changed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpucarve.config.device_plugin_import import pool_name
from gpucarve.config.quota_import import quota_blocks
from gpucarve.core.catalog import AmbiguousModel, Catalog, GpuModel, UnknownModel
from gpucarve.core.policy import Policy
from gpucarve.core.problems import Problem, Severity
from gpucarve.core.quantity import QuantityError, cpu_milli, memory_mib, whole_count
from gpucarve.kube.view.nodes.devices import DraDevices, read_slices

PRODUCT = "nvidia.com/gpu.product"
COUNT = "nvidia.com/gpu.count"
REPLICAS = "nvidia.com/gpu.replicas"
STRATEGY = "nvidia.com/gpu.sharing-strategy"
MIG_PREFIX = "nvidia.com/mig-"
GPU = "nvidia.com/gpu"
SHARED = "nvidia.com/gpu.shared"


@dataclass(frozen=True)
class _Shape:
    """What makes nodes one pool."""

    model: str
    product: str
    gpus: int
    sharing: str
    replicas: int | None = None
    renamed: bool = True
    layout: tuple[tuple[str, int], ...] = ()
    single: bool = False
    cpus: int | None = None
    memory_gib: int | None = None
    taints: tuple[tuple[str, str, str], ...] = ()
    dra: bool = False


@dataclass
class Adopted:
    doc: dict[str, Any]
    report: list[str] = field(default_factory=list)


def _count(value: Any) -> int | None:
    try:
        return whole_count(str(value))
    except QuantityError:
        return None


def _model(catalog: Catalog, product: str) -> GpuModel | None:
    try:
        return catalog.lookup(product)
    except (UnknownModel, AmbiguousModel):
        return None


def _shape(
    node: Mapping[str, Any],
    catalog: Catalog,
    report: list[str],
    dra: DraDevices,
    shared: frozenset[str] = frozenset(),
) -> _Shape | None:
    meta = node.get("metadata") or {}
    name = meta.get("name", "?")
    labels = meta.get("labels") or {}
    alloc = (node.get("status") or {}).get("allocatable") or {}
    gpu_resources = {k: _count(v) for k, v in alloc.items() if str(k).startswith("nvidia.com/")}
    if not any(gpu_resources.values()):
        if name in dra.devices or name in dra.odd:
            return _dra_shape(node, catalog, report, dra, shared)
        if labels.get(PRODUCT):
            report.append(f"node {name}: GFD says {labels[PRODUCT]} but neither the device "
                          "plugin nor NVIDIA's DRA driver publishes its GPUs: left out; check "
                          "the node's GPU stack")  # fmt: skip
        return None  # no GPUs: not gpucarve's
    product = labels.get(PRODUCT)
    if not product:
        report.append(f"node {name}: GPUs but no {PRODUCT} label (GPU Feature Discovery): "
                      "left out; run GFD (the GPU Operator does) and adopt again")  # fmt: skip
        return None
    base, _, single_profile = str(product).partition("-MIG-")
    model = _model(catalog, base)
    if model is None:
        report.append(f"node {name}: {PRODUCT}={product} is no catalog model: left out; add it "
                      "to a catalog file (--catalog)")  # fmt: skip
        return None
    gpus = _count(labels.get(COUNT)) or 0
    extra = _resources(node)
    mig = {k.removeprefix(MIG_PREFIX): n for k, n in gpu_resources.items() if k.startswith(
        MIG_PREFIX) and n}  # fmt: skip
    if single_profile:
        # single strategy: GFD counts instances; the GPUs are the instances over per-GPU ones
        return _single(name, model, str(product), single_profile, gpu_resources, extra, report)
    if mig:
        return _mig(name, model, str(product), gpus, mig, extra, report)
    strategy = labels.get(STRATEGY)
    if strategy in ("time-slicing", "mps") or gpu_resources.get(SHARED):
        replicas = _count(labels.get(REPLICAS))
        renamed = bool(gpu_resources.get(SHARED))
        published = gpu_resources.get(SHARED if renamed else GPU) or 0
        if not replicas and gpus:
            replicas = published // gpus
        mode = "mps" if strategy == "mps" else "time-slicing"
        return _Shape(model.id, str(product), gpus, mode, replicas, renamed, **extra)
    return _Shape(model.id, str(product), gpus or (gpu_resources.get(GPU) or 0), "exclusive",
                  **extra)  # fmt: skip


def _dra_shape(
    node: Mapping[str, Any],
    catalog: Catalog,
    report: list[str],
    dra: DraDevices,
    shared: frozenset[str],
) -> _Shape | None:
    """A node whose GPUs are the DRA driver's devices: whole GPUs (`gpuN`), shared ones (on
    the `shared` nodes, whose devices allow several allocations) or MIG devices
    (`gpuN/<profile>@<start>`), each GPU the same."""
    meta = node.get("metadata") or {}
    name = str(meta.get("name", "?"))
    units = dra.devices.get(name) or {}
    if dra.odd.get(name) or not units:
        report.append(f"node {name}: the DRA driver publishes devices adopt cannot read "
                      f"({', '.join(dra.odd.get(name, ())[:3]) or 'none'}; partitionable "
                      "devices are a dynamic MIG pool): left out; write its pool by hand "
                      "with devices: dra")  # fmt: skip
        return None
    labels = meta.get("labels") or {}
    first = next(iter(units.values()))
    product = str(labels.get(PRODUCT) or first.attributes.get("productName", "")).replace(" ", "-")
    model = _model(catalog, product)
    if model is None:
        report.append(f"node {name}: the DRA driver's product {product or '(none)'} is no "
                      "catalog model: left out; add it to a catalog file (--catalog)")  # fmt: skip
        return None
    gpus = {u.partition("/")[0] for u in units}
    profiles = Counter(u.partition("/")[2].partition("@")[0] for u in units if "/" in u)
    extra = _resources(node)
    if name in shared:
        # a GPU shared by memory: the policy's replicas (the quota's unit) are GFD's label
        replicas = _count(labels.get(REPLICAS))
        if not replicas:
            report.append(f"node {name}: the DRA driver shares its GPUs but no {REPLICAS} "
                          "label says in how many parts: left out; write its pool by hand "
                          "with sharing: time-slicing and replicas")  # fmt: skip
            return None
        return _Shape(model.id, product, len(gpus), "time-slicing", replicas, dra=True, **extra)
    if not profiles:
        return _Shape(model.id, product, len(gpus), "exclusive", dra=True, **extra)
    if any(n % len(gpus) for n in profiles.values()):
        report.append(
            f"node {name}: MIG devices {dict(profiles)} do not split evenly over its "
            f"{len(gpus)} GPUs: left out; give its pool a perGpu layout by hand"
        )
        return None
    layout = tuple(sorted((p, n // len(gpus)) for p, n in profiles.items()))
    return _Shape(model.id, product, len(gpus), "mig", layout=layout, dra=True, **extra)


def _resources(node: Mapping[str, Any]) -> dict[str, Any]:
    alloc = (node.get("status") or {}).get("allocatable") or {}
    try:
        cpus = cpu_milli(str(alloc["cpu"])) // 1000 if "cpu" in alloc else None
        memory_gib = memory_mib(str(alloc["memory"])) // 1024 if "memory" in alloc else None
    except QuantityError:
        cpus = memory_gib = None  # unreadable: the pool leaves them out
    taints = tuple(
        sorted(
            (str(t.get("key", "")), str(t.get("value", "")), str(t.get("effect", "")))
            for t in ((node.get("spec") or {}).get("taints") or [])
            if str(t.get("key", "")).startswith("nvidia.com/")
        )
    )
    return {"cpus": cpus or None, "memory_gib": memory_gib or None, "taints": taints}


def _mig(
    name: str,
    model: GpuModel,
    product: str,
    gpus: int,
    mig: Mapping[str, int],
    extra: dict[str, Any],
    report: list[str],
) -> _Shape | None:
    if not gpus or any(n % gpus for n in mig.values()):
        report.append(f"node {name}: MIG instances {dict(mig)} do not split evenly over its "
                      f"{gpus} GPUs: left out; give its pool a perGpu layout by hand "
                      "(gpucarve mig import reads the MIG manager's configuration)")  # fmt: skip
        return None
    layout = tuple(sorted((p, n // gpus) for p, n in mig.items()))
    return _Shape(model.id, product, gpus, "mig", layout=layout, **extra)


def _single(
    name: str,
    model: GpuModel,
    product: str,
    profile: str,
    resources: Mapping[str, int | None],
    extra: dict[str, Any],
    report: list[str],
) -> _Shape | None:
    instances = resources.get(GPU) or 0
    prof = model.mig.profile(profile) if model.mig is not None else None
    if prof is None:
        report.append(f"node {name}: {product}: {model.id} has no MIG profile {profile}: left out")
        return None
    per_gpu = prof.max_instances
    if not instances or instances % per_gpu:
        report.append(f"node {name}: {instances} {profile} instances are not whole GPUs of "
                      f"{per_gpu}: left out")  # fmt: skip
        return None
    return _Shape(model.id, product, instances // per_gpu, "mig", layout=((profile, per_gpu),),
                  single=True, **extra)  # fmt: skip


def _pool(shape: _Shape, name: str, nodes: int, labels: dict[str, str]) -> dict[str, Any]:
    block: dict[str, Any] = {"name": name, "gpuModel": shape.model, "nodes": nodes,
                             "gpusPerNode": shape.gpus, "sharing": shape.sharing}  # fmt: skip
    if shape.cpus:
        block["cpusPerNode"] = shape.cpus
    if shape.memory_gib:
        block["memoryGiBPerNode"] = shape.memory_gib
    if shape.sharing in ("time-slicing", "mps"):
        block["replicas"] = shape.replicas
        if not shape.renamed:
            block["renameByDefault"] = False
    if shape.sharing == "mig":
        block["mig"] = {"layout": dict(shape.layout)}
        if shape.single:
            block["mig"]["strategy"] = "single"
    if shape.dra:
        block["devices"] = "dra"
    block["nodeLabels"] = labels
    if shape.taints:
        block["taints"] = [{"key": k, "value": v, "effect": e} for k, v, e in shape.taints]
    return block


def _selectors(
    shapes: Mapping[_Shape, list[Mapping[str, Any]]],
) -> dict[_Shape, dict[str, str]]:
    """Per pool, labels all its nodes share that no other pool's nodes carry all of: the
    product first, then the sharing strategy and the MIG configuration GFD and the MIG manager
    set; the pool's own `gpucarve.io/pool` label when nothing else tells it apart."""
    out: dict[_Shape, dict[str, str]] = {}
    keys = (PRODUCT, STRATEGY, "nvidia.com/mig.config", REPLICAS)
    for shape, nodes in shapes.items():
        common: dict[str, str] = {}
        chosen: dict[str, str] = {}
        for key in keys:
            values = {str((n.get("metadata") or {}).get("labels", {}).get(key)) for n in nodes}
            if len(values) == 1 and "None" not in values:
                common[key] = values.pop()
        for key in keys:
            if key not in common:
                continue
            chosen[key] = common[key]
            if not _others_match(shapes, shape, chosen):
                break
        out[shape] = chosen if chosen and not _others_match(shapes, shape, chosen) else {}
    return out


def _others_match(
    shapes: Mapping[_Shape, list[Mapping[str, Any]]], me: _Shape, labels: Mapping[str, str]
) -> bool:
    for shape, nodes in shapes.items():
        if shape == me:
            continue
        for n in nodes:
            have = (n.get("metadata") or {}).get("labels") or {}
            if all(have.get(k) == v for k, v in labels.items()):
                return True
    return False


def adopt(
    nodes: Sequence[Mapping[str, Any]],
    catalog: Catalog,
    name: str = "adopted",
    slices: Sequence[Mapping[str, Any]] = (),
) -> Adopted:
    """The pools a cluster's `nodes` already are, DRA nodes read from the ResourceSlices
    (queues come with `with_quotas`, once the pools' flavors are known)."""
    report: list[str] = []
    groups: dict[_Shape, list[Mapping[str, Any]]] = {}
    dra = read_slices(slices)
    shared = frozenset(
        str((s.get("spec") or {}).get("nodeName"))
        for s in slices
        if any(
            d.get("allowMultipleAllocations") for d in (s.get("spec") or {}).get("devices") or []
        )
    )
    for node in sorted(nodes, key=lambda n: str((n.get("metadata") or {}).get("name"))):
        shape = _shape(node, catalog, report, dra, shared)
        if shape is not None:
            groups.setdefault(shape, []).append(node)
    selectors = _selectors(groups)
    pools: list[dict[str, Any]] = []
    used: Counter[str] = Counter()
    for shape, members in groups.items():
        prefix = model_prefix(catalog, shape.model)
        base = pool_name(f"{prefix}-{'dra-' if shape.dra else ''}{shape.sharing}")
        used[base] += 1
        pname = base if used[base] == 1 else f"{base}-{used[base]}"
        labels = selectors[shape] or {"gpucarve.io/pool": pname}
        if not selectors[shape]:
            report.append(f"pool {pname}: no label tells its {len(members)} nodes from other "
                          f"pools': label them gpucarve.io/pool={pname}")  # fmt: skip
        pools.append(_pool(shape, pname, len(members), labels))
        names = ", ".join(str((n.get("metadata") or {}).get("name")) for n in members[:5])
        more = f" and {len(members) - 5} more" if len(members) > 5 else ""
        report.append(f"pool {pname}: {len(members)} nodes ({names}{more}), {shape.gpus} × "
                      f"{shape.model}, {shape.sharing}")  # fmt: skip
    doc: dict[str, Any] = {
        "apiVersion": "gpucarve.io/v1alpha1",
        "kind": "Policy",
        "metadata": {"name": name, "description": "Read from a live cluster by gpucarve adopt."},
        "pools": pools,
        "queues": [],
        "priorityClasses": [],
    }
    return Adopted(doc, report)


def model_prefix(catalog: Catalog, model_id: str) -> str:
    return next(m.flavor_prefix for m in catalog.models if m.id == model_id)


def _bound_gpu_pods(
    pods: Sequence[Mapping[str, Any]],
) -> Iterator[tuple[str, dict[str, int]]]:
    """(namespace, GPU resource -> count) of each pod bound and not finished that asks for a
    GPU."""
    for p in pods:
        spec = p.get("spec") or {}
        if not spec.get("nodeName") or (p.get("status") or {}).get("phase") not in (
            "Running",
            "Pending",
        ):
            continue
        asked: Counter[str] = Counter()
        for c in spec.get("containers") or []:
            for k, v in ((c.get("resources") or {}).get("limits") or {}).items():
                n = _count(v)
                if str(k).startswith("nvidia.com/") and n:
                    asked[str(k)] += n
        if asked:
            yield str((p.get("metadata") or {}).get("namespace")), dict(asked)


def gpu_namespaces(pods: Sequence[Mapping[str, Any]]) -> Counter[str]:
    """Namespace -> GPU pods bound and not finished."""
    return Counter(ns for ns, _ in _bound_gpu_pods(pods))


def _gpu_use(pods: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], int]:
    """(namespace, GPU resource) -> what its bound, unfinished pods request."""
    out: Counter[tuple[str, str]] = Counter()
    for ns, asked in _bound_gpu_pods(pods):
        for resource, n in asked.items():
            out[(ns, resource)] += n
    return dict(out)


def binding(objects: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]]) -> list[str]:
    """The ResourceQuotas whose GPU limits are reached: their namespace can start no more GPU
    pods until some finish (what Kubernetes reports in the quota's status, or the pods')."""
    use = _gpu_use(pods)
    out = []
    for obj in objects:
        if obj.get("kind") != "ResourceQuota":
            continue
        meta = obj.get("metadata") or {}
        ns = str(meta.get("namespace"))
        used = (obj.get("status") or {}).get("used") or {}
        for key, value in sorted(((obj.get("spec") or {}).get("hard") or {}).items()):
            resource = str(key).removeprefix("requests.")
            hard = _count(value)
            if not resource.startswith("nvidia.com/") or hard is None:
                continue
            have = _count(used[key]) if key in used else use.get((ns, resource), 0)
            if have is not None and have >= hard:
                out.append(f"quota binds: namespace {ns} uses {have} of its {hard} {resource} "
                           "(no more such pods start until some finish; in gpucarve a "
                           "queue borrows what its cohort leaves unused)")  # fmt: skip
    return out


def with_quotas(
    adopted: Adopted,
    objects: Sequence[Mapping[str, Any]],
    policy: Policy,
    pods: Sequence[Mapping[str, Any]],
) -> None:
    """Queues and priority classes from ResourceQuotas and PriorityClasses, against the pools'
    flavors (`policy`, built from the pools); a quota that cannot be read is reported, and so
    is what runs where."""
    objs = [((f"object {i + 1}",), o) for i, o in enumerate(objects)]
    blocks, problems = quota_blocks(objs, policy, split=True)
    adopted.doc["queues"] = blocks["queues"]
    adopted.doc["priorityClasses"] = blocks["priorityClasses"]
    for p in problems:
        said = "as read" if p.severity is Severity.WARNING else "left out"
        adopted.report.append(f"{said}: {said_problem(p)}")
    adopted.report += binding(objects, pods)
    governed = {ns for q in blocks["queues"] for ns in q["namespaces"]}
    quoted = {str((o.get("metadata") or {}).get("namespace")) for o in objects
              if o.get("kind") == "ResourceQuota"}  # fmt: skip
    running = gpu_namespaces(pods)
    adopted.report += [f"namespace {ns}: {n} GPU pods" for ns, n in sorted(running.items())]
    if running:
        adopted.report.append(
            "what would move: nothing that runs; pods bound before gpucarve keep their GPUs and "
            "count against their queue's quota (scheduling.boundElsewhere: keep), so a queue "
            "over its quota as read waits for its own pods to finish"
        )
    for ns in sorted(set(running) - governed):
        why = ("its ResourceQuota could not be read (above)" if ns in quoted
               else "without a ResourceQuota on GPUs")  # fmt: skip
        adopted.report.append(
            f"namespace {ns} runs GPU pods {why}: give it a queue (gpucarve governs only "
            "namespaces a queue lists)"
        )


def said_problem(p: Problem) -> str:
    """A problem as one line of the report: where, what, the fix."""
    return f"{p.location}: {p.message} (fix: {p.fix})"
