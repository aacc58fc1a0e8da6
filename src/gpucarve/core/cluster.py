"""The cluster as immutable values: nodes, GPUs, slices, and what is allocated to whom.

Units are integers only: milli-GPU for compute, MiB for memory, milli-CPU for CPU. A *slice* is
one allocatable unit on a GPU (the whole GPU, a MIG instance, a time-slice or MPS replica).
`ClusterState.allocate` returns a new state and refuses anything that would break an
invariant: no slice held twice, and no GPU's memory promised beyond what it has.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from gpucarve.core import mig
from gpucarve.core.amounts import Bound, FlavorName, ProfileName
from gpucarve.core.mig import Instance
from gpucarve.core.policy import Flavor, Policy, Pool, SharingMode, SliceKind, Taint
from gpucarve.core.vocabulary import GPU_PRESENT_LABEL, MISMATCH_LABEL, MODE_LABEL, POOL_LABEL

# The seed's `gpu-mode` node label: the sharing mode of the node's pool, for node selectors.


@dataclass(frozen=True, slots=True)
class Slice:
    id: str
    node: str
    gpu: int
    kind: SliceKind
    flavor: FlavorName
    compute_milli: int
    memory_mib: int
    profile: ProfileName | None = None
    start: int | None = None
    replica: int | None = None


@dataclass(frozen=True, slots=True)
class Gpu:
    node: str
    index: int
    model_id: str
    memory_mib: int
    mig_layout: tuple[Instance, ...]
    slice_ids: tuple[str, ...]

    @property
    def id(self) -> str:
        return f"{self.node}/gpu{self.index}"


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    pool: str
    labels: tuple[tuple[str, str], ...]
    taints: tuple[Taint, ...]
    cpu_milli: int | None  # None: the node does not say, and nothing is held to it
    memory_mib: int | None
    gpus: tuple[Gpu, ...]

    @property
    def cpu(self) -> Bound:
        """Allocatable milli-CPU as a bound on what its pods request."""
        return Bound(self.cpu_milli)

    @property
    def memory(self) -> Bound:
        """Allocatable memory in MiB as a bound on what its pods request."""
        return Bound(self.memory_mib)

    def label(self, key: str) -> str | None:
        for k, v in self.labels:
            if k == key:
                return v
        return None


@dataclass(frozen=True, slots=True)
class Allocation:
    slice_id: str
    owner: str
    compute_milli: int
    memory_mib: int


# Owner of the new instances of a GPU whose MIG layout is being changed: they exist in the
# plan but are not usable until the reconfiguration is done.
RECONFIGURING = "mig-reconfigure:"
# Owner of the free slices of a GPU out of service for a fault (`OUT_OF_SERVICE` + `node/gpuN`):
# the scheduler and the simulator hold them, so nothing new is placed there.
OUT_OF_SERVICE = "unhealthy:"

# Taints a driver puts on nodes that take no new pods at all (cordoned, not ready, disagreeing
# with their pool): the engine places nothing there and does not repartition their GPUs.
UNAVAILABLE_TAINTS = (
    "node.kubernetes.io/unschedulable",
    "node.kubernetes.io/not-ready",
    MISMATCH_LABEL,
)


class AllocationError(ValueError):
    """An allocation that would break an invariant of the cluster model (a caller's bug)."""


@dataclass(frozen=True)
class ClusterState:
    nodes: tuple[Node, ...]
    slices: Mapping[str, Slice]
    allocations: Mapping[str, Allocation] = field(default_factory=lambda: MappingProxyType({}))
    _node_index: Mapping[str, Node] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_node_index", {n.name: n for n in self.nodes})

    def with_allocations(self, allocations: Mapping[str, Allocation]) -> ClusterState:
        """The same nodes and slices with other allocations (the caller keeps the invariants,
        as `apply` does); the node index is shared, not rebuilt."""
        new = object.__new__(ClusterState)
        object.__setattr__(new, "nodes", self.nodes)
        object.__setattr__(new, "slices", self.slices)
        object.__setattr__(new, "allocations", allocations)
        object.__setattr__(new, "_node_index", self._node_index)
        return new

    def node(self, name: str) -> Node:
        return self._node_index[name]

    def gpu_of(self, slice_id: str) -> Gpu:
        s = self.slices[slice_id]
        return self._node_index[s.node].gpus[s.gpu]

    def gpus(self) -> Iterator[Gpu]:
        for n in self.nodes:
            yield from n.gpus

    def free_slices(self, flavor: FlavorName | None = None) -> list[Slice]:
        return [
            s
            for sid, s in self.slices.items()
            if sid not in self.allocations and (flavor is None or s.flavor == flavor)
        ]

    def gpu_memory_promised(self, gpu: Gpu) -> int:
        return sum(a.memory_mib for sid in gpu.slice_ids if (a := self.allocations.get(sid)))

    def allocate(
        self,
        slice_id: str,
        owner: str,
        *,
        memory_mib: int | None = None,
        compute_milli: int | None = None,
    ) -> ClusterState:
        """A new state with `slice_id` held by `owner`.

        A replica's declared memory may differ from its equal share (a pod that declares
        `gpucarve.io/gpu-memory`), but the GPU's total stays within its memory.
        """
        s = self.slices.get(slice_id)
        if s is None:
            raise AllocationError(f"no slice {slice_id!r}")
        if slice_id in self.allocations:
            held = self.allocations[slice_id].owner
            raise AllocationError(f"slice {slice_id} is already held by {held}")
        mem = s.memory_mib if memory_mib is None else memory_mib
        comp = s.compute_milli if compute_milli is None else compute_milli
        if mem < 0 or comp < 0:
            raise AllocationError(f"negative request on {slice_id}")
        if s.kind in (SliceKind.WHOLE, SliceKind.MIG) and mem > s.memory_mib:
            raise AllocationError(f"{slice_id} has {s.memory_mib} MiB, {mem} asked")
        gpu = self.gpu_of(slice_id)
        # Whole GPUs and MIG instances own their memory; only replicas share one GPU's memory,
        # so only they can oversubscribe it.
        if s.kind in (SliceKind.TIME_SLICE, SliceKind.MPS) and (
            self.gpu_memory_promised(gpu) + mem > gpu.memory_mib
        ):
            raise AllocationError(
                f"{gpu.id} would promise {self.gpu_memory_promised(gpu) + mem} MiB of "
                f"{gpu.memory_mib} MiB"
            )
        allocations = dict(self.allocations)
        allocations[slice_id] = Allocation(slice_id, owner, comp, mem)
        return ClusterState(self.nodes, self.slices, MappingProxyType(allocations))

    def release(self, owner: str) -> ClusterState:
        kept = {k: a for k, a in self.allocations.items() if a.owner != owner}
        return ClusterState(self.nodes, self.slices, MappingProxyType(kept))

    def invariant_violations(self) -> list[str]:
        """Empty for a consistent state; used by tests and by drivers after rebuilding."""
        out: list[str] = []
        for sid, a in self.allocations.items():
            if sid not in self.slices:
                out.append(f"allocation on unknown slice {sid}")
            elif a.slice_id != sid:
                out.append(f"allocation for {a.slice_id} filed under {sid}")
        seen: set[str] = set()
        for gpu in self.gpus():
            for sid in gpu.slice_ids:
                if sid in seen:
                    out.append(f"slice {sid} belongs to two GPUs")
                seen.add(sid)
            promised = self.gpu_memory_promised(gpu)
            if not gpu.mig_layout and promised > gpu.memory_mib:
                out.append(f"{gpu.id}: {promised} MiB promised of {gpu.memory_mib} MiB")
            if gpu.mig_layout:
                model_slices = [self.slices[s] for s in gpu.slice_ids]
                if any(s.kind is not SliceKind.MIG for s in model_slices):
                    out.append(f"{gpu.id}: MIG GPU with non-MIG slices")
        if seen != set(self.slices):
            out.append("slices without a GPU")
        return out


PRODUCT_LABEL = "nvidia.com/gpu.product"


def gfd_expectations(pool: Pool) -> tuple[tuple[str, ...], dict[str, str]]:
    """What GPU Feature Discovery may say on a node of `pool`: the product names it may
    publish (the model's id, aliases and GFD names; under the single MIG strategy, the MIG
    device's), and the value of each other label it writes that the pool decides (count,
    memory, and replicas outside MIG). A node that says otherwise is not the pool's."""
    m = pool.model
    names: tuple[str, ...] = (m.id, *m.aliases, *m.gfd_products)
    said = {"nvidia.com/gpu.count": str(pool.gpus_per_node),
            "nvidia.com/gpu.memory": str(m.memory_mib)}  # fmt: skip
    if pool.mig_single:
        profile = pool.mig_layouts[0][0].profile
        names = tuple(f"{n}-MIG-{profile}" for n in names)
        said["nvidia.com/gpu.count"] = str(sum(len(layout) for layout in pool.mig_layouts))
        said["nvidia.com/gpu.memory"] = str(
            next(p.memory_mib for p in (m.mig.profiles if m.mig else ()) if p.name == profile)
        )
    if pool.sharing is not SharingMode.MIG:
        said["nvidia.com/gpu.replicas"] = str(pool.replicas)
    return names, said


def decided_labels(pool: Pool) -> dict[str, frozenset[str | None]]:
    """The node labels whose values the policy decides for the nodes of `pool` that gpucarve
    places on, each with the values such a node can carry (None: the label is absent). Every
    other label (hostname, zone, an administrator's) is the cluster's, unknown to the policy.
    A node whose GFD labels disagree is kept out of placements (`kube/view/nodes/inventory.py`), the
    scheduler writes the mode label before it places, and a node joins a pool by its pool
    label or by the pool's `nodeLabels`."""
    names, said = gfd_expectations(pool)
    out: dict[str, frozenset[str | None]] = {
        PRODUCT_LABEL: frozenset([*names, None]),
        MODE_LABEL: frozenset([pool.sharing.value]),
    }
    for key, value in said.items():
        out[key] = frozenset([value, None])
    by_labels = dict(pool.node_labels)
    out[POOL_LABEL] = frozenset([pool.name, *([by_labels.get(POOL_LABEL)] if by_labels else [])])
    return out


def _node_labels(pool: Pool, policy: Policy, index: int) -> tuple[tuple[str, str], ...]:
    m = pool.model
    labels = dict(pool.node_labels)
    labels[GPU_PRESENT_LABEL] = "true"
    labels["nvidia.com/gpu.product"] = m.gfd_products[0] if m.gfd_products else m.id
    labels["nvidia.com/gpu.count"] = str(pool.gpus_per_node)
    labels["nvidia.com/gpu.memory"] = str(m.memory_mib)
    labels[POOL_LABEL] = pool.name
    labels[MODE_LABEL] = pool.sharing.value
    if pool.sharing is SharingMode.MIG and pool.mig_single:
        # GFD's labels describe the MIG device under the single strategy
        profile = pool.mig_layouts[0][0].profile
        memory = next(p.memory_mib for p in (m.mig.profiles if m.mig else ()) if p.name == profile)
        labels["nvidia.com/gpu.product"] += f"-MIG-{profile}"
        labels["nvidia.com/gpu.count"] = str(sum(len(layout) for layout in pool.mig_layouts))
        labels["nvidia.com/gpu.memory"] = str(memory)
        labels["nvidia.com/mig.strategy"] = "single"
    elif pool.sharing is SharingMode.MIG:
        # GFD writes no sharing replicas for MIG-enabled parent GPUs.
        labels["nvidia.com/mig.strategy"] = "mixed"
    else:
        labels["nvidia.com/gpu.replicas"] = str(pool.replicas)
        labels["nvidia.com/gpu.sharing-strategy"] = (
            "none" if pool.sharing is SharingMode.EXCLUSIVE else str(pool.sharing)
        )
    if pool.topology.nodes_per_rack:
        labels[policy.topology_keys.rack] = (
            f"{pool.name}-rack{index // pool.topology.nodes_per_rack}"
        )
    if pool.topology.nodes_per_block:
        labels[policy.topology_keys.block] = (
            f"{pool.name}-block{index // pool.topology.nodes_per_block}"
        )
    if pool.topology.nodes_per_nvlink_domain:
        domain = index // pool.topology.nodes_per_nvlink_domain
        labels[policy.topology_keys.nvlink_domain] = f"{pool.name}-nvl{domain}"
    return tuple(sorted(labels.items()))


def gpu_of_slice(slice_id: str) -> int | None:
    """The GPU index on its node of a slice this module named (`node/gpuN`, `node/gpuN/...`);
    None for an id of another form."""
    parts = slice_id.split("/")
    if len(parts) < 2 or not parts[1].startswith("gpu") or not parts[1][3:].isdigit():
        return None
    return int(parts[1][3:])


def _mig_slice(by_name: Mapping[ProfileName, Flavor], node: str, g: int, inst: Instance) -> Slice:
    f = by_name[inst.profile]
    return Slice(
        id=f"{node}/gpu{g}/{inst.profile}@{inst.start}",
        node=node,
        gpu=g,
        kind=SliceKind.MIG,
        flavor=f.name,
        compute_milli=f.compute_milli,
        memory_mib=f.memory_mib,
        profile=inst.profile,
        start=inst.start,
    )


def _gpu_slices(pool: Pool, node: str, g: int, layout: tuple[Instance, ...]) -> list[Slice]:
    prefix = f"{node}/gpu{g}"
    if pool.sharing is SharingMode.MIG:
        by_name = {f.profile: f for f in pool.flavors() if f.profile}
        return [_mig_slice(by_name, node, g, inst) for inst in layout]
    (flavor,) = pool.flavors()  # a pool that is not MIG has one flavor
    if pool.sharing is SharingMode.EXCLUSIVE:
        return [Slice(prefix, node, g, SliceKind.WHOLE, flavor.name, 1000, pool.model.memory_mib)]
    return [
        Slice(
            id=f"{prefix}/r{r}",
            node=node,
            gpu=g,
            kind=flavor.kind,
            flavor=flavor.name,
            compute_milli=flavor.compute_milli,
            memory_mib=flavor.memory_mib,
            replica=r,
        )
        for r in range(pool.replicas)
    ]


def pool_node(
    policy: Policy,
    pool: Pool,
    name: str,
    index: int,
    *,
    labels: tuple[tuple[str, str], ...] | None = None,
    taints: tuple[Taint, ...] | None = None,
    cpu_milli: int | None = None,
    memory_mib: int | None = None,
    mig_layouts: Sequence[tuple[Instance, ...]] | None = None,
) -> tuple[Node, list[Slice]]:
    """One node of `pool` with its GPUs and slices. A driver that knows the real node (the
    Kubernetes scheduler) passes its labels, taints and allocatable CPU and memory, and for a
    dynamic MIG pool the layouts its GPUs have now; otherwise they come from the policy."""
    gpus = []
    node_slices: list[Slice] = []
    layouts = pool.mig_layouts if mig_layouts is None else mig_layouts
    for g in range(pool.gpus_per_node):
        layout = layouts[g] if pool.sharing is SharingMode.MIG else ()
        gpu_slices = _gpu_slices(pool, name, g, layout)
        node_slices.extend(gpu_slices)
        gpus.append(
            Gpu(
                name,
                g,
                pool.model.id,
                pool.model.memory_mib,
                layout,
                tuple(s.id for s in gpu_slices),
            )
        )
    node = Node(
        name=name,
        pool=pool.name,
        labels=_node_labels(pool, policy, index) if labels is None else labels,
        taints=pool.taints if taints is None else taints,
        cpu_milli=pool.cpu_milli_per_node if cpu_milli is None else cpu_milli,
        memory_mib=pool.memory_mib_per_node if memory_mib is None else memory_mib,
        gpus=tuple(gpus),
    )
    return node, node_slices


def check_layouts(pool: Pool) -> None:
    if pool.sharing is SharingMode.MIG:
        geom = pool.model.mig
        assert geom is not None
        for layout in pool.mig_layouts:
            problems = mig.placement_problems(geom, layout)
            assert not problems, problems


def build_cluster(policy: Policy) -> ClusterState:
    """The empty cluster a policy describes: node `<pool>-<i>`, GPU `<node>/gpu<j>`."""
    nodes: list[Node] = []
    slices: dict[str, Slice] = {}
    for pool in policy.pools:
        check_layouts(pool)
        for i in range(pool.nodes):
            node, node_slices = pool_node(policy, pool, f"{pool.name}-{i}", i)
            for s in node_slices:
                slices[s.id] = s
            nodes.append(node)
    return ClusterState(tuple(nodes), MappingProxyType(slices))


def potential_mig_slices(policy: Policy, cluster: ClusterState) -> dict[str, Slice]:
    """Every MIG slice a dynamic pool's GPUs could have (each profile the pool has a flavor
    for, at each of its starts), for drivers and metrics that must know slices a repartition
    creates. Includes the current ones."""
    out = dict(cluster.slices)
    pools = {p.name: p for p in policy.pools if p.mig_dynamic is not None and p.model.mig}
    for node in cluster.nodes:
        pool = pools.get(node.pool)
        if pool is None:
            continue
        assert pool.model.mig is not None
        by_name = {f.profile: f for f in pool.flavors() if f.profile}
        for g in node.gpus:
            for prof in pool.model.mig.profiles:
                if prof.name in by_name:
                    for start in prof.starts:
                        sl = _mig_slice(by_name, node.name, g.index, Instance(start, prof.name))
                        out.setdefault(sl.id, sl)
    return out


def relayout(
    policy: Policy, cluster: ClusterState, layouts: Mapping[str, tuple[Instance, ...]]
) -> ClusterState:
    """The cluster with new MIG layouts for some GPUs (by `node/gpuN`). Allocations move along
    unchanged: the caller keeps the instances in use (engine.repartition does)."""
    pools = {p.name: p for p in policy.pools}
    nodes = []
    slices = dict(cluster.slices)
    for node in cluster.nodes:
        if not any(g.id in layouts for g in node.gpus):
            nodes.append(node)
            continue
        by_name = {f.profile: f for f in pools[node.pool].flavors() if f.profile}
        gpus = []
        for g in node.gpus:
            layout = layouts.get(g.id)
            if layout is None:
                gpus.append(g)
                continue
            for sid in g.slice_ids:
                del slices[sid]
            new = [_mig_slice(by_name, node.name, g.index, inst) for inst in layout]
            for sl in new:
                slices[sl.id] = sl
            gpus.append(replace(g, mig_layout=tuple(layout), slice_ids=tuple(s.id for s in new)))
        nodes.append(replace(node, gpus=tuple(gpus)))
    for sid, a in cluster.allocations.items():
        if sid not in slices:
            raise AllocationError(f"a new layout drops {sid}, held by {a.owner}")
    return ClusterState(tuple(nodes), MappingProxyType(slices), cluster.allocations)
