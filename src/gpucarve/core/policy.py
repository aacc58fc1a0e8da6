"""The validated policy: pools, flavors, queues, cohorts and priority classes as plain values.

Built by `gpucarve.config.policy_build` from a YAML file (or, later, from CRDs); everything
downstream (cluster model, engine, simulator, renderers) reads only these types.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from gpucarve.core.amounts import UNLIMITED, Bound, FlavorName, ProfileName, QuotaKey, as_key
from gpucarve.core.catalog import MILLI_PER_GPU, GpuModel
from gpucarve.core.gpu_faults import CATALOGUE, Budget, Drain, FaultClass, class_named
from gpucarve.core.held_idle import IdleRule
from gpucarve.core.mig import Instance
from gpucarve.core.vocabulary import (
    BLOCK_LABEL,
    DEVICE_CLASS_QUOTA_SUFFIX,
    DRA_GPU_CLASS,
    DRA_MIG_CLASS,
)


class SharingMode(StrEnum):
    EXCLUSIVE = "exclusive"
    MIG = "mig"
    TIME_SLICING = "time-slicing"
    MPS = "mps"


class DeviceApi(StrEnum):
    """How a pool's nodes hand GPUs to pods: NVIDIA's device plugin (extended resources in
    allocatable) or Dynamic Resource Allocation (devices in ResourceSlices, ResourceClaims)."""

    DEVICE_PLUGIN = "device-plugin"
    DRA = "dra"


class SliceKind(StrEnum):
    """What one allocatable unit on a GPU is."""

    WHOLE = "whole"
    MIG = "mig"
    TIME_SLICE = "time-slice"
    MPS = "mps"


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True, slots=True)
class Flavor:
    """A kind of allocatable GPU capacity; quotas are counted in its slices.

    `compute_milli` and `memory_mib` are what one slice is worth: a whole GPU is 1000 milli and
    all its memory; a MIG instance its share of compute slices and its own memory; a time-slice
    or MPS replica an equal share of both.
    """

    name: FlavorName
    model_id: str
    kind: SliceKind
    profile: ProfileName | None
    replicas: int
    compute_milli: int
    memory_mib: int
    sm_count: int
    # MIG instances the device plugin's single strategy publishes as `nvidia.com/gpu`
    single: bool = False
    # time-slicing or MPS replicas published as `nvidia.com/gpu` (the device plugin's
    # `renameByDefault: false`, its default): a request for that resource gets replicas here
    unrenamed: bool = False
    # slices handed out through Dynamic Resource Allocation: pods claim them with a
    # ResourceClaim of the device class, never with an extended resource
    dra: bool = False

    @property
    def resource_name(self) -> str:
        """The Kubernetes extended resource a pod requests for one slice of this flavor (for
        a DRA flavor, the device class its claims name)."""
        if self.dra:
            return DRA_MIG_CLASS if self.kind is SliceKind.MIG else DRA_GPU_CLASS
        if self.single or self.unrenamed:
            return "nvidia.com/gpu"
        if self.kind is SliceKind.MIG:
            assert self.profile is not None
            return "nvidia.com/mig-" + self.profile.replace("+", ".")
        if self.kind in (SliceKind.TIME_SLICE, SliceKind.MPS):
            return "nvidia.com/gpu.shared"
        return "nvidia.com/gpu"

    @property
    def quota_name(self) -> str:
        """What a ResourceQuota's `hard` caps one slice of this flavor by: the device
        resource's requests, or for a DRA flavor the count of devices of its class."""
        if self.dra:
            return f"{self.resource_name}.{DEVICE_CLASS_QUOTA_SUFFIX}"
        return f"requests.{self.resource_name}"


def flavor_name(
    prefix: str, mode: SharingMode, profile: str | None = None, *, dra: bool = False
) -> FlavorName:
    if dra:
        # apart from the device-plugin flavor of the same model: a pod that asks for
        # nvidia.com/gpu cannot use a DRA GPU, nor a claim a device-plugin one
        prefix = f"{prefix}-dra"
    if mode is SharingMode.MIG:
        assert profile is not None
        return FlavorName(f"{prefix}-mig-{profile.replace('+', '.')}")
    return FlavorName(
        {
            SharingMode.EXCLUSIVE: f"{prefix}-full",
            SharingMode.TIME_SLICING: f"{prefix}-shared",
            SharingMode.MPS: f"{prefix}-mps",
        }[mode]
    )


@dataclass(frozen=True, slots=True)
class Topology:
    """How a pool's nodes group into racks and NVLink domains (consecutive nodes)."""

    nodes_per_rack: int | None = None
    nodes_per_nvlink_domain: int | None = None
    nodes_per_block: int | None = None


@dataclass(frozen=True, slots=True)
class MigDynamic:
    min_interval_s: int
    max_gpus_per_cycle: int
    # profiles the GPUs may be carved into beyond those of the layouts
    profiles: tuple[str, ...] = ()
    # False: only GPUs with no instance in use change (whole-GPU reconfiguration, as the
    # GPU Operator's MIG manager does); True: instances in use are kept in place
    keep_in_use: bool = False
    # whole-GPU granularity: drain the GPUs that empty soonest for waiting MIG work
    # (engine.drain)
    drain: bool = False


@dataclass(frozen=True, slots=True)
class Pool:
    name: str
    model: GpuModel
    nodes: int
    gpus_per_node: int
    sharing: SharingMode
    replicas: int
    # One layout per GPU index on a node; empty unless sharing is MIG.
    mig_layouts: tuple[tuple[Instance, ...], ...]
    node_labels: tuple[tuple[str, str], ...]
    taints: tuple[Taint, ...]
    topology: Topology
    flavor_prefix: str
    price_per_gpu_hour: float | None
    cpu_milli_per_node: int | None
    memory_mib_per_node: int | None
    # Set when the pool's MIG layouts may be changed on demand (see engine.repartition).
    mig_dynamic: MigDynamic | None = None
    # The device plugin's single MIG strategy: every instance is an `nvidia.com/gpu`.
    mig_single: bool = False
    # Time-slicing and MPS: replicas published as `nvidia.com/gpu.shared` (False: as
    # `nvidia.com/gpu`, the device plugin's own default).
    renamed: bool = True
    devices: DeviceApi = DeviceApi.DEVICE_PLUGIN

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def hourly_price(self) -> float | None:
        if self.price_per_gpu_hour is None:
            return None
        return self.price_per_gpu_hour * self.gpus

    @property
    def unit(self) -> QuotaKey:
        """The key of the GPU unit its flavor prefix names (where one is: `Policy.units`)."""
        return QuotaKey(self.flavor_prefix)

    def flavors(self) -> list[Flavor]:
        """The flavors this pool provides, with how many slices of each one node holds."""
        return [f for f, _ in self.flavor_slices_per_node()]

    def flavor_slices_per_node(self) -> list[tuple[Flavor, int]]:
        m = self.model
        if self.sharing is SharingMode.MIG:
            assert m.mig is not None
            per: dict[str, int] = {}
            for layout in self.mig_layouts:
                for inst in layout:
                    per[inst.profile] = per.get(inst.profile, 0) + 1
            if self.mig_dynamic is not None:
                for name in self.mig_dynamic.profiles:
                    per.setdefault(name, 0)  # none yet: a repartition creates them
            out = []
            for prof in m.mig.profiles:
                if prof.name not in per:
                    continue
                dra = self.devices is DeviceApi.DRA
                flavor = Flavor(
                    name=flavor_name(self.flavor_prefix, SharingMode.MIG, prof.name, dra=dra),
                    model_id=m.id,
                    kind=SliceKind.MIG,
                    profile=prof.name,
                    replicas=1,
                    compute_milli=MILLI_PER_GPU * prof.compute_slices // m.mig.compute_slices,
                    memory_mib=prof.memory_mib,
                    sm_count=m.mig_profile_sm_count(prof),
                    single=self.mig_single,
                    dra=dra,
                )
                out.append((flavor, per[prof.name]))
            return out
        kind = {
            SharingMode.EXCLUSIVE: SliceKind.WHOLE,
            SharingMode.TIME_SLICING: SliceKind.TIME_SLICE,
            SharingMode.MPS: SliceKind.MPS,
        }[self.sharing]
        dra = self.devices is DeviceApi.DRA
        flavor = Flavor(
            name=flavor_name(self.flavor_prefix, self.sharing, dra=dra),
            model_id=m.id,
            kind=kind,
            profile=None,
            replicas=self.replicas,
            compute_milli=MILLI_PER_GPU // self.replicas,
            memory_mib=m.memory_mib // self.replicas,
            sm_count=m.sm_count // self.replicas,
            unrenamed=kind is not SliceKind.WHOLE and not self.renamed and not dra,
            dra=dra,
        )
        return [(flavor, self.gpus_per_node * self.replicas)]


@dataclass(frozen=True, slots=True)
class GpuUnit:
    """One quota unit across every flavor of a flavor prefix (one GPU model): GPUs, whichever
    way they are carved. A quota keyed by the unit's name counts `parts_per_gpu` parts to the
    GPU; a slice of each flavor costs `charges[flavor]` parts. A MIG instance costs its share of
    the GPU's memory slices (its placement size: 3g.40gb on an A100 is half the GPU, whatever
    else shares it), a whole GPU all of it, a time-slicing or MPS replica its equal share."""

    name: QuotaKey
    model_id: str
    parts_per_gpu: int
    charges: tuple[tuple[FlavorName, int], ...]
    gpus: int

    def charge(self, flavor: FlavorName) -> int | None:
        for name, parts in self.charges:
            if name == flavor:
                return parts
        return None

    def gpus_text(self, parts: int) -> str:
        """`parts` as GPUs: `6`, `5.5`, `0.125`."""
        whole, rest = divmod(parts, self.parts_per_gpu)
        if not rest:
            return str(whole)
        return f"{parts / self.parts_per_gpu:.6g}"


def gpu_share(flavor: Flavor, model: GpuModel) -> float:
    """What one slice of `flavor` is of its GPU, as GPU units charge it: a MIG instance its
    memory slices' share (its placement size), a replica its equal share, a whole GPU one."""
    if flavor.kind is SliceKind.MIG:
        assert model.mig is not None and flavor.profile is not None
        prof = model.mig.profile(flavor.profile)
        assert prof is not None
        return prof.memory_slices / model.mig.memory_slices
    return 1.0 / flavor.replicas


def gpu_shares(policy: Policy) -> dict[FlavorName, float]:
    """Flavor -> what one of its slices is of a GPU (`gpu_share`, by the flavor's model)."""
    models = {p.model.id: p.model for p in policy.pools}
    return {f.name: gpu_share(f, models[f.model_id]) for f in policy.flavors.values()}


def flavor_pools(policy: Policy) -> dict[FlavorName, str]:
    """Flavor -> the pool serving it (pools joined by `+` when several do)."""
    out: dict[FlavorName, list[str]] = {}
    for pool in policy.pools:
        for f in pool.flavors():
            out.setdefault(f.name, []).append(pool.name)
    return {f: "+".join(sorted(ps)) for f, ps in out.items()}


def unit_parts_per_slice(flavor: Flavor, model: GpuModel, parts_per_gpu: int) -> int:
    if flavor.kind is SliceKind.MIG:
        assert model.mig is not None and flavor.profile is not None
        prof = model.mig.profile(flavor.profile)
        assert prof is not None
        return parts_per_gpu * prof.memory_slices // model.mig.memory_slices
    return parts_per_gpu // flavor.replicas


def gpu_units(pools: tuple[Pool, ...] | list[Pool]) -> dict[QuotaKey, GpuUnit]:
    """A unit per flavor prefix whose pools all hold one GPU model."""
    by_prefix: dict[str, list[Pool]] = {}
    for pool in pools:
        by_prefix.setdefault(pool.flavor_prefix, []).append(pool)
    out: dict[QuotaKey, GpuUnit] = {}
    for prefix, members in sorted(by_prefix.items()):
        model = members[0].model
        if any(p.model.id != model.id for p in members):
            continue
        denominators = [1]
        for p in members:
            if p.sharing is SharingMode.MIG and model.mig is not None:
                denominators.append(model.mig.memory_slices)
            else:
                denominators.append(p.replicas)
        parts = math.lcm(*denominators)
        charges = {
            f.name: unit_parts_per_slice(f, model, parts) for p in members for f in p.flavors()
        }
        out[QuotaKey(prefix)] = GpuUnit(
            QuotaKey(prefix),
            model.id,
            parts,
            tuple(sorted(charges.items())),
            sum(p.gpus for p in members),
        )
    return out


@dataclass(frozen=True, slots=True)
class Quota:
    """A queue's quota in one flavor, in slices, or in a GPU unit, in its parts (`flavor`:
    the quota key). Without a lending limit the queue lends all of nominal."""

    flavor: QuotaKey
    nominal: int
    borrowing_limit: Bound = UNLIMITED
    lending_limit: Bound = UNLIMITED

    @property
    def lendable(self) -> int:
        """What of nominal the queue lends its cohort."""
        return self.lending_limit.or_else(self.nominal)


@dataclass(frozen=True, slots=True)
class Queue:
    name: str
    namespaces: tuple[str, ...]
    cohort: str | None
    quotas: tuple[Quota, ...]
    # Fair-share weight in thousandths, so that ordering never depends on float rounding.
    weight_milli: int
    max_per_workload: tuple[tuple[FlavorName, int], ...]
    allowed_priority_classes: tuple[str, ...]
    # The most its work within nominal quota waits for quota it lent: reclaim sparing and
    # reclaim grace hold its reclaims off no longer (None: their own bounds; 0: never).
    reclaim_wait_s: int | None = None
    # when its running work counts as holding GPUs idle, and what follows (None: never)
    idleness: IdleRule | None = None

    def quota(self, flavor: QuotaKey) -> Quota | None:
        for q in self.quotas:
            if q.flavor == flavor:
                return q
        return None


@dataclass(frozen=True, slots=True)
class Cohort:
    """A cohort of queues, and of cohorts below it when it is their `parent`: its members lend
    it what they do not use, it lends that on to its own parent (within its lending limit)
    and borrows from it (within its borrowing limit); `quotas` are capacity of its own."""

    name: str
    description: str = ""
    parent: str | None = None
    quotas: tuple[Quota, ...] = ()
    weight_milli: int = 1000
    # whether a member past its own quota may reclaim from outside while it holds room
    reclaim_for_members: bool = True

    def quota(self, flavor: QuotaKey) -> Quota | None:
        for q in self.quotas:
            if q.flavor == flavor:
                return q
        return None


@dataclass(frozen=True, slots=True)
class PriorityClass:
    name: str
    value: int
    preemptible: bool
    default: bool = False
    description: str = ""


@dataclass(frozen=True, slots=True)
class TopologyKeys:
    rack: str
    nvlink_domain: str
    block: str = BLOCK_LABEL


class QueueingStrategy(StrEnum):
    """What a queue does when its head cannot be admitted.

    BEST_EFFORT_FIFO admits work behind a blocked head until the head has waited
    `max_head_wait_s`; from then on the head holds its queue (strict) and the capacity it needs
    (no newer, same-or-lower priority work may take it) until it is admitted. STRICT_FIFO holds
    the queue at once.
    """

    BEST_EFFORT_FIFO = "best-effort-fifo"
    STRICT_FIFO = "strict-fifo"


# the scores a policy that names none weighs (scheduling.scoring), by plugin name, sorted
DEFAULT_SCORING: tuple[tuple[str, int], ...] = (("binpack", 1), ("fragmentation", 2))
DEFAULT_VICTIM_ORDER = "cheapest-first"


@dataclass(frozen=True, slots=True)
class ScoringWeights:
    """Each score plugin's weight, by the plugin's name (the engine's registry names the
    plugins, and the policy is checked against it); a plugin not named weighs 0. Kept sorted
    and without zero weights, so equal profiles are equal values."""

    by_plugin: tuple[tuple[str, int], ...] = DEFAULT_SCORING

    @classmethod
    def of(cls, weights: Mapping[str, int]) -> ScoringWeights:
        return cls(tuple(sorted((n, w) for n, w in weights.items() if w)))

    def __getitem__(self, name: str) -> int:
        for n, w in self.by_plugin:
            if n == name:
                return w
        return 0


# A cycle's placements cost about 0.1 ms a pod at 20,000 nodes (docs/engine.md, Speed): this
# many keep a cycle, and so a pod's wait for its binding, within a few hundred milliseconds.
DEFAULT_MAX_PODS_PER_CYCLE = 2000


@dataclass(frozen=True, slots=True)
class SchedulingConfig:
    queueing: QueueingStrategy = QueueingStrategy.BEST_EFFORT_FIFO
    max_head_wait_s: int = 900
    min_runtime_s: int = 300
    preemption: bool = True
    scoring: ScoringWeights = ScoringWeights()
    candidates_per_pod: int = 16
    # False models schedulers without gangs (kube-scheduler): each pod is placed on its own as
    # room appears, and the pods already placed hold their GPUs while the rest wait.
    gang: bool = True
    # A GPU pod of a governed namespace bound by something other than gpucarve (another
    # scheduler, nodeName): "keep" charges it to its queue and never evicts it; "evict" also
    # evicts it.
    bound_elsewhere: str = "keep"
    # which running work preemption and reclaim try first: a victim order of the engine's
    # registry, by name (engine.victims.VICTIM_ORDERS)
    victim_order: str = DEFAULT_VICTIM_ORDER
    # A gang that failed on placement and has waited this long reserves the nodes where it
    # will fit soonest (None: never); work expected to end after then may not take what it
    # needs there (engine.reservation).
    reserve_after_s: int | None = None
    # Seconds work runs when nothing says (no declaration, too few finished runs of its
    # kind): long, so unknown work never backfills a reservation it might delay.
    default_runtime_s: int = 86_400
    # Reclaim spares a whole gang more than this many times the reclaimer's size until the
    # reclaimer has waited `reclaim_large_after_s` (None: no gang is spared); something
    # cheaper, or the gang's own end, usually comes first.
    reclaim_large_ratio: int | None = 4
    reclaim_large_after_s: int = 43_200
    # Reclaim waits this long at most for borrowed work expected to end within it (declared
    # or learned, never the default runtime) instead of evicting it (None: never waits).
    reclaim_grace_s: int | None = 7200
    # On Kubernetes: a reclaim victim whose PodDisruptionBudget has refused its eviction this
    # long is deleted (None: a budget holds reclaim off for ever, and with it the lenders'
    # nominal quota).
    reclaim_past_budget_s: int | None = 300
    # Pods a cycle places before it leaves what it has not tried for the next cycle (None: no
    # bound): a cycle's length, and with it how long a pod waits for its binding, stays
    # bounded however large the backlog.
    max_pods_per_cycle: int | None = DEFAULT_MAX_PODS_PER_CYCLE
    # Running workloads a cycle may move (evict to be re-placed) so that a gang quota admits,
    # but no node set holds, fits now (None: no consolidation; engine.consolidate).
    consolidate_max_moves: int | None = None
    # A queue's unused nominal quota is not lent while its own work that fits within that
    # quota waits (engine.quota.Quotas.waiting): a loan made then is reclaimed as soon as room
    # for that work appears, and the borrower's progress is thrown away.
    loans_wait_for_lenders: bool = False
    # Queues take turns by what they borrow now plus what they borrowed recently, decayed by
    # this half-life (None: by what they borrow now; core.usage).
    usage_half_life_s: int | None = None


class Minimize(StrEnum):
    """The figure `simulate --recommend` ranks policies by (`objective.minimize`)."""

    WASTED = "wasted-gpu-hours"
    LOST = "lost-gpu-hours"
    IDLE = "idle-gpu-hours"


@dataclass(frozen=True, slots=True)
class Objective:
    """What a recommended policy is judged by (`objective:`): the figure it minimises, and
    what may give for it — each named queue's wait p95 bound (seconds); a queue not named may
    wait no longer than under the policy as read, plus `unnamed_growth` of that."""

    minimize: Minimize = Minimize.WASTED
    wait_p95_s: Mapping[str, int] = field(default_factory=dict)
    unnamed_growth: float = 0.1


@dataclass(frozen=True, slots=True)
class Monitoring:
    """Alert thresholds (`gpucarve render monitoring`); seconds are `for:` durations."""

    util_low_percent: int = 30
    util_low_s: int = 3600
    memory_high_percent: int = 90
    memory_high_s: int = 300
    temperature_high_c: int = 85
    temperature_high_s: int = 300
    queue_starved_s: int = 1800
    gang_stuck_s: int = 900


@dataclass(frozen=True, slots=True)
class GpuHealth:
    check_s: int = 60
    temperature_c: int = 90
    memory_errors: int = 10
    clean_checks: int = 3
    xids: tuple[int, ...] = (48, 63, 64, 74, 79, 94, 95)
    taint: str = "allUnhealthy"  # allUnhealthy | needsReset | never
    # evict running pods of a GPU out of service (True), only report them (False), or as
    # each fault class's drain says (None)
    evict_pods: bool | None = None
    classes: tuple[FaultClass, ...] = CATALOGUE  # tuple: the policy stays hashable
    budget: Budget = field(default_factory=Budget)
    flap_limit: int = 3
    flap_window_s: int = 3600

    def by_name(self) -> dict[str, FaultClass]:
        return {c.name: c for c in self.classes}

    def fault_class(self, name: str) -> FaultClass:
        return class_named(name, self.by_name())

    def evicts(self, fault_class: str) -> bool:
        if self.evict_pods is not None:
            return self.evict_pods
        return self.fault_class(fault_class).drain is Drain.EVICT


# The HPA's rate limits gpucarve renders (and the simulator replays): at most two new GPU pods
# a minute, or doubling, whichever is more (each needs a free GPU and minutes to load a
# model); one fewer a minute on the way down.
SCALE_UP_PODS = 2
SCALE_DOWN_PODS = 1


@dataclass(frozen=True, slots=True)
class Autoscale:
    """An inference Deployment's autoscaling (`autoscaling:` in the policy)."""

    deployment: str
    namespace: str
    queue: str
    min_replicas: int
    max_replicas: int
    resources: tuple[tuple[str, int], ...]  # one replica's request
    priority_class: str | None
    gpu_util_percent: int
    latency_ms: int | None
    latency_metric: str
    latency_quantile: float
    up_window_s: int
    down_window_s: int


@dataclass(frozen=True)
class Policy:
    name: str
    description: str
    pools: tuple[Pool, ...]
    flavors: Mapping[FlavorName, Flavor]
    capacity: Mapping[FlavorName, int]
    queues: tuple[Queue, ...]
    cohorts: tuple[Cohort, ...]
    priority_classes: tuple[PriorityClass, ...]
    topology_keys: TopologyKeys
    scheduling: SchedulingConfig = SchedulingConfig()
    monitoring: Monitoring = Monitoring()
    gpu_health: GpuHealth = GpuHealth()
    autoscaling: tuple[Autoscale, ...] = ()
    objective: Objective = Objective()
    # quota units by name (a flavor prefix); see GpuUnit
    units: Mapping[QuotaKey, GpuUnit] = field(default_factory=dict)

    def quota_keys(self, queue: Queue, flavor: FlavorName) -> tuple[tuple[QuotaKey, int], ...]:
        """What one slice of `flavor` is charged to in `queue`: its own quota and its GPU
        unit's, each with the slice's cost there (empty: the queue has no quota for it)."""
        out: list[tuple[QuotaKey, int]] = []
        for q in queue.quotas:
            if q.flavor == as_key(flavor):
                out.append((q.flavor, 1))
            else:
                unit = self.units.get(q.flavor)
                parts = None if unit is None else unit.charge(flavor)
                if parts is not None:
                    out.append((q.flavor, parts))
        return tuple(out)

    def pool(self, name: str) -> Pool:
        for p in self.pools:
            if p.name == name:
                return p
        raise KeyError(name)

    def queue(self, name: str) -> Queue:
        for q in self.queues:
            if q.name == name:
                return q
        raise KeyError(name)

    def cohort(self, name: str) -> Cohort:
        for c in self.cohorts:
            if c.name == name:
                return c
        raise KeyError(name)

    @property
    def nested(self) -> bool:
        """Whether a cohort sits in another or holds quota of its own (a tree, not a flat
        set of cohorts)."""
        return any(c.parent is not None or c.quotas for c in self.cohorts)

    def governed_namespaces(self) -> frozenset[str]:
        """The namespaces its queues list: gpucarve places and admits pods of these only."""
        return frozenset(ns for q in self.queues for ns in q.namespaces)
