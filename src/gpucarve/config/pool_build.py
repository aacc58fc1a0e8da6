"""Check one pool of a policy against the catalog and MIG geometry, and build it."""

from __future__ import annotations

import difflib
import re
from collections import Counter
from collections.abc import Mapping

from gpucarve.config.policy_model import PoolSpec
from gpucarve.core import mig
from gpucarve.core.catalog import AmbiguousModel, Catalog, GpuModel, MigGeometry, UnknownModel
from gpucarve.core.mig import Instance
from gpucarve.core.policy import DeviceApi, MigDynamic, Pool, SharingMode, Taint, Topology
from gpucarve.core.problems import Path, Problem

_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")


def label_key_problem(key: str) -> str | None:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return f"label key {key!r} has an invalid prefix {prefix!r} (must be a DNS subdomain)"
    if not _LABEL_NAME.match(name):
        return (
            f"label key {key!r}: the name part must be 1-63 characters of letters, digits, "
            "'-', '_' or '.', starting and ending with a letter or digit"
        )
    return None


def label_value_problem(value: str) -> str | None:
    if len(value) > 63 or not _LABEL_VALUE.match(value):
        return (
            f"label value {value!r} must be at most 63 letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit"
        )
    return None


def resolve_model(catalog: Catalog, name: str, path: Path) -> tuple[GpuModel | None, list[Problem]]:
    try:
        return catalog.lookup(name), []
    except AmbiguousModel as exc:
        return None, [
            Problem(
                path,
                "ambiguous-gpu-model",
                f"GPU model {name!r} could mean {', '.join(exc.candidates)}",
                f"name one of them exactly, e.g. gpuModel: {exc.candidates[0]}",
            )
        ]
    except UnknownModel as exc:
        hint = f"did you mean {' or '.join(exc.suggestions)}? " if exc.suggestions else ""
        return None, [
            Problem(
                path,
                "unknown-gpu-model",
                f"unknown GPU model {name!r}",
                f"{hint}`gpucarve catalog list` shows every model; add your own with --catalog",
            )
        ]


def _profile_problems(
    model: GpuModel, geom: MigGeometry, counts: Mapping[str, int], path: Path
) -> list[Problem]:
    out = []
    for name in mig.unknown_profiles(geom, counts):
        close = difflib.get_close_matches(name, geom.profile_names, n=2, cutoff=0.5)
        hint = f"did you mean {' or '.join(close)}? " if close else ""
        out.append(
            Problem(
                (*path, name),
                "unknown-mig-profile",
                f"{model.id} has no MIG profile {name!r}",
                f"{hint}{model.id} profiles: {', '.join(geom.profile_names)}",
            )
        )
    for name, count in counts.items():
        if count < 1:
            out.append(
                Problem(
                    (*path, name),
                    "bad-count",
                    f"count {count} for {name}: each listed profile needs at least one instance",
                    "use a count ≥ 1 or remove the profile",
                )
            )
    return out


def _layout(
    model: GpuModel, counts: Mapping[str, int], path: Path
) -> tuple[tuple[Instance, ...] | None, list[Problem]]:
    geom = model.mig
    assert geom is not None
    problems = _profile_problems(model, geom, counts, path)
    if problems:
        return None, problems
    result = mig.place(geom, counts)
    if result.instances is not None:
        return result.instances, []
    try:
        closest = mig.closest_layouts(geom, counts)
        suggestions = "e.g. " + " or ".join(f"{{{mig.describe_layout(k)}}}" for k in closest)
    except mig.LayoutSearchTooLarge:  # a catalog geometry too large to search: no examples
        suggestions = "one whose instances fit the GPU's memory and compute slices"
    layout = mig.describe_layout(counts, geom)
    return None, [
        Problem(
            path,
            "mig-layout-invalid",
            f"{layout} does not fit on one {model.id}: " + "; ".join(result.reasons),
            f"use a valid layout, {suggestions} (`gpucarve mig layouts {model.id}` lists them all)",
        )
    ]


def _single_problems(spec: PoolSpec, mpath: Path) -> list[Problem]:
    """The single strategy publishes every instance as one `nvidia.com/gpu`: the device plugin
    refuses a node whose instances differ, and a repartition would change what a GPU is."""
    assert spec.mig is not None
    layouts = [spec.mig.layout] if spec.mig.layout else [e.layout for e in spec.mig.perGpu or []]
    profiles = sorted({p for layout in layouts for p in layout})
    out: list[Problem] = []
    if len(profiles) > 1:
        out.append(
            Problem(
                (*mpath, "strategy"),
                "mig-single-profiles",
                f"the single MIG strategy needs one profile on every GPU, the layout has "
                f"{', '.join(profiles)}",
                "use one profile (e.g. {" + profiles[0] + ": N}) or `strategy: mixed`",
            )
        )
    if spec.mig.dynamic is not None and spec.mig.dynamic.enabled:
        out.append(
            Problem(
                (*mpath, "strategy"),
                "mig-single-dynamic",
                "dynamic MIG changes profiles, which under the single strategy changes what "
                "nvidia.com/gpu means on a node",
                "use `strategy: mixed` with `dynamic:`, or drop `dynamic:`",
            )
        )
    return out


def _mig_layouts(
    spec: PoolSpec, model: GpuModel, path: Path
) -> tuple[tuple[tuple[Instance, ...], ...], list[Problem]]:
    mpath = (*path, "mig")
    if spec.mig is None:
        return (), [
            Problem(
                path,
                "mig-layout-missing",
                "sharing is mig but the pool has no `mig:` section",
                "add `mig: {layout: {<profile>: <count>, ...}}` or `mig: {perGpu: [...]}`",
            )
        ]
    if (spec.mig.layout is None) == (spec.mig.perGpu is None):
        return (), [
            Problem(
                mpath,
                "mig-layout-missing",
                "give exactly one of `layout` (all GPUs) and `perGpu` (per GPU index)",
                "keep one of the two keys",
            )
        ]
    problems: list[Problem] = []
    if spec.mig.strategy == "single":
        problems += _single_problems(spec, mpath)
    if spec.mig.layout is not None:
        inst, probs = _layout(model, spec.mig.layout, (*mpath, "layout"))
        problems.extend(probs)
        return ((inst,) * spec.gpusPerNode if inst is not None else ()), problems
    assert spec.mig.perGpu is not None
    by_gpu: dict[int, tuple[Instance, ...]] = {}
    for i, entry in enumerate(spec.mig.perGpu):
        epath = (*mpath, "perGpu", i)
        inst, probs = _layout(model, entry.layout, (*epath, "layout"))
        problems.extend(probs)
        for g in entry.gpus:
            if not 0 <= g < spec.gpusPerNode:
                problems.append(
                    Problem(
                        (*epath, "gpus"),
                        "bad-gpu-index",
                        f"GPU index {g} does not exist on a node with {spec.gpusPerNode} GPUs",
                        f"use indices 0..{spec.gpusPerNode - 1}",
                    )
                )
            elif g in by_gpu:
                problems.append(
                    Problem(
                        (*epath, "gpus"),
                        "duplicate-gpu-index",
                        f"GPU index {g} has two layouts",
                        "list each GPU index in one perGpu entry",
                    )
                )
            elif inst is not None:
                by_gpu[g] = inst
    missing = [g for g in range(spec.gpusPerNode) if g not in by_gpu]
    if missing and not problems:
        problems.append(
            Problem(
                (*mpath, "perGpu"),
                "gpu-without-layout",
                f"GPU index(es) {missing} have no layout (a MIG GPU without instances is unusable)",
                "add them to a perGpu entry",
            )
        )
    if problems:
        return (), problems
    return tuple(by_gpu[g] for g in range(spec.gpusPerNode)), []


def _label_problems(spec: PoolSpec, path: Path) -> list[Problem]:
    problems: list[Problem] = []
    for key, value in spec.nodeLabels.items():
        for msg in (label_key_problem(key), label_value_problem(value)):
            if msg:
                problems.append(
                    Problem((*path, "nodeLabels", key), "bad-label", msg, "fix the label")
                )
    for i, t in enumerate(spec.taints):
        msg = label_key_problem(t.key) or label_value_problem(t.value)
        if msg:
            problems.append(Problem((*path, "taints", i), "bad-taint", msg, "fix the taint"))
    return problems


def _replica_problems(
    spec: PoolSpec, mode: SharingMode, model: GpuModel | None, path: Path
) -> list[Problem]:
    problems: list[Problem] = []
    if mode in (SharingMode.TIME_SLICING, SharingMode.MPS):
        if spec.replicas is None:
            problems.append(
                Problem(
                    path,
                    "replicas-missing",
                    f"sharing is {mode} but `replicas` is not set",
                    "add `replicas: N` (the device plugin needs N ≥ 2)",
                )
            )
        elif spec.replicas < 2:
            problems.append(
                Problem(
                    (*path, "replicas"),
                    "out-of-range",
                    f"replicas must be ≥ 2 for {mode}, got {spec.replicas}",
                    "use replicas ≥ 2, or `sharing: exclusive` for whole GPUs",
                )
            )
        elif mode is SharingMode.MPS and model and spec.replicas > model.max_mps_replicas:
            problems.append(
                Problem(
                    (*path, "replicas"),
                    "out-of-range",
                    f"MPS allows at most {model.max_mps_replicas} clients per {model.id} "
                    f"(compute capability {model.compute_capability}), got {spec.replicas}",
                    f"use replicas ≤ {model.max_mps_replicas}",
                )
            )
    elif spec.replicas is not None:
        problems.append(
            Problem(
                (*path, "replicas"),
                "replicas-not-allowed",
                f"`replicas` only applies to time-slicing and mps, not to {mode}",
                "remove `replicas`",
            )
        )
    if spec.renameByDefault is not None and mode not in (SharingMode.TIME_SLICING, SharingMode.MPS):
        problems.append(
            Problem(
                (*path, "renameByDefault"),
                "rename-not-allowed",
                f"`renameByDefault` only applies to time-slicing and mps, not to {mode}",
                "remove `renameByDefault`",
            )
        )
    return problems


def _dra_problems(spec: PoolSpec, mode: SharingMode, path: Path) -> list[Problem]:
    """What a DRA pool may be: whole GPUs, MIG devices of a static layout, or GPUs shared by
    consumable capacity (time-slicing, MPS)."""
    if spec.renameByDefault is not None:
        return [
            Problem(
                (*path, "renameByDefault"),
                "dra-rename",
                "`renameByDefault` is the device plugin's; a DRA pool's shares are claimed "
                "from the GPU device itself",
                "remove `renameByDefault`",
            )
        ]
    if spec.mig is not None and spec.mig.strategy == "single":
        return [
            Problem(
                (*path, "mig", "strategy"),
                "dra-single-strategy",
                "the single MIG strategy is the device plugin's; the DRA driver publishes each "
                "MIG device with its profile",
                "remove `mig.strategy`",
            )
        ]
    return []


def _section_problems(spec: PoolSpec, mode: SharingMode, path: Path) -> list[Problem]:
    problems: list[Problem] = []
    if DeviceApi(spec.devices) is DeviceApi.DRA:
        problems += _dra_problems(spec, mode, path)
    if spec.mig is not None and mode is not SharingMode.MIG:
        problems.append(
            Problem(
                (*path, "mig"),
                "mig-not-allowed",
                f"a `mig:` section needs `sharing: mig`, this pool is {mode}",
                "remove `mig:` or set `sharing: mig`",
            )
        )
    for tkey, tval in (
        ("nodesPerRack", spec.topology.nodesPerRack),
        ("nodesPerNvlinkDomain", spec.topology.nodesPerNvlinkDomain),
        ("nodesPerBlock", spec.topology.nodesPerBlock),
    ):
        if tval is not None and tval > spec.nodes:
            problems.append(
                Problem(
                    (*path, "topology", tkey),
                    "out-of-range",
                    f"{tkey} is {tval} but the pool has {spec.nodes} nodes",
                    f"use a value ≤ {spec.nodes}",
                )
            )
    per_rack, per_block = spec.topology.nodesPerRack, spec.topology.nodesPerBlock
    if per_rack and per_block and per_block % per_rack:
        # racks nest in blocks: a rack cut in two by a block boundary is no rack
        problems.append(
            Problem(
                (*path, "topology", "nodesPerBlock"),
                "out-of-range",
                f"nodesPerBlock {per_block} is not a multiple of nodesPerRack {per_rack}",
                f"use a multiple of {per_rack}, such as {per_rack * max(1, per_block // per_rack)}",
            )
        )
    return problems


def build_pool(spec: PoolSpec, catalog: Catalog, path: Path) -> tuple[Pool | None, list[Problem]]:
    model, problems = resolve_model(catalog, spec.gpuModel, (*path, "gpuModel"))
    mode = SharingMode(spec.sharing)
    problems += _label_problems(spec, path)
    problems += _replica_problems(spec, mode, model, path)
    problems += _section_problems(spec, mode, path)
    if model is None:
        return None, problems
    layouts: tuple[tuple[Instance, ...], ...] = ()
    if mode is SharingMode.MIG:
        if model.mig is None:
            mig_models = ", ".join(m.id for m in catalog.models if m.mig_capable)
            problems.append(
                Problem(
                    (*path, "sharing"),
                    "mig-unsupported",
                    f"{model.id} does not support MIG",
                    f"use time-slicing or mps on it, or a MIG-capable model: {mig_models}",
                )
            )
        else:
            layouts, probs = _mig_layouts(spec, model, path)
            problems.extend(probs)
            problems.extend(_dynamic_problems(spec, model, path))
    if problems:
        return None, problems
    pool = Pool(
        name=spec.name,
        model=model,
        nodes=spec.nodes,
        gpus_per_node=spec.gpusPerNode,
        sharing=mode,
        replicas=spec.replicas or 1,
        mig_layouts=layouts,
        node_labels=tuple(sorted(spec.nodeLabels.items())),
        taints=tuple(Taint(t.key, t.value, t.effect) for t in spec.taints),
        topology=Topology(
            spec.topology.nodesPerRack,
            spec.topology.nodesPerNvlinkDomain,
            spec.topology.nodesPerBlock,
        ),
        flavor_prefix=spec.flavorPrefix or model.flavor_prefix,
        price_per_gpu_hour=(
            spec.pricePerGpuHour if spec.pricePerGpuHour is not None else model.price_per_gpu_hour
        ),
        cpu_milli_per_node=spec.cpusPerNode * 1000 if spec.cpusPerNode else None,
        memory_mib_per_node=spec.memoryGiBPerNode * 1024 if spec.memoryGiBPerNode else None,
        mig_dynamic=_dynamic(spec),
        mig_single=spec.mig is not None and spec.mig.strategy == "single",
        renamed=spec.renameByDefault is not False,
        devices=DeviceApi(spec.devices),
    )
    return pool, []


def _dynamic(spec: PoolSpec) -> MigDynamic | None:
    d = spec.mig.dynamic if spec.mig is not None else None
    if d is None or not d.enabled:
        return None
    # On a DRA pool each partition is a device the driver creates when a claim for it is
    # prepared (partitionable devices: the GPU's memory slices are counters its partitions
    # consume), so a GPU changes without touching its instances in use and at no cost: there
    # `instance` granularity and no minimum interval are the defaults.
    dra = spec.devices == DeviceApi.DRA.value
    given = d.model_fields_set
    instance = d.granularity == "instance" or (dra and "granularity" not in given)
    interval = 0 if dra and "minSecondsBetweenChanges" not in given else d.minSecondsBetweenChanges
    return MigDynamic(
        interval,
        d.maxGpusPerCycle,
        tuple(d.profiles or ()),
        keep_in_use=instance,
        drain=d.drain and not instance,
    )


def _dynamic_problems(spec: PoolSpec, model: GpuModel, path: Path) -> list[Problem]:
    d = spec.mig.dynamic if spec.mig is not None else None
    if d is None:
        return []
    assert model.mig is not None
    try:  # the repartition planner searches every layout of the model
        mig.enumerate_layouts(model.mig)
    except mig.LayoutSearchTooLarge as exc:
        return [
            Problem(
                (*path, "mig", "dynamic"),
                "mig-geometry-too-large",
                f"{model.id}: {exc}",
                "use dynamic MIG only with a catalog geometry like NVIDIA's (8 memory slices, "
                "a profile per size)",
            )
        ]
    if not d.profiles:
        return []
    known = [p.name for p in model.mig.profiles if not p.media_extensions]
    out = []
    for j, name in enumerate(d.profiles):
        if name not in known:
            out.append(
                Problem(
                    (*path, "mig", "dynamic", "profiles", j),
                    "unknown-mig-profile",
                    f"{model.id} has no MIG profile {name!r} a repartition can create "
                    "(media-extension profiles are only carved statically)",
                    f"use one of {', '.join(known)}",
                )
            )
    return out


def layout_counts(layout: tuple[Instance, ...]) -> Counter[str]:
    return Counter(i.profile for i in layout)
