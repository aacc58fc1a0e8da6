"""The values a cycle returns. Every decision says which stage and plugin made it and why."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from gpucarve.core.amounts import FlavorName, QuotaKey
from gpucarve.core.held_idle import IdleStage
from gpucarve.core.mig import Instance
from gpucarve.core.usage import UsageBook
from gpucarve.core.workload import PodAssignment


class Stage(StrEnum):
    VALIDATION = "validation"  # the workload can never run under this policy as it is
    QUEUEING = "queueing"  # held back by queue order (a strict or starving head)
    QUOTA = "quota"  # the queue's quota and the cohort's lending do not allow it
    PLACEMENT = "placement"  # quota allows it but no set of nodes and GPUs holds the gang
    PREEMPTION = "preemption"  # allowed by quota after reclaim or preemption


class Cause(StrEnum):
    RECLAIM = "reclaim"  # a queue took back nominal quota that another queue borrowed
    PREEMPT = "preempt"  # a higher-priority workload of the same queue needed the room
    TIMEOUT = "timeout"  # a gang in part placed past its timeout releases what it holds
    GPU_FAILURE = "gpu-failure"  # a GPU under it failed (the simulator's failure replay)
    # moved: evicted so that a waiting gang fits, to be placed again at once elsewhere
    CONSOLIDATE = "consolidate"
    # idle: its GPUs stayed below its queue's activity threshold past idleness.reclaimAfter
    IDLE = "idle"


class Plugin(StrEnum):
    """The part of the engine that made a decision: each pending reason names one, and
    metrics, explain and the drivers branch on it (never on a message's text)."""

    FLAVOR = "flavor"  # no flavor the queue has quota for serves the request
    CEILING = "ceiling"  # more than the queue could ever hold, or than the cluster has
    CAPACITY_QUOTA = "capacity-quota"  # nominal quota and cohort lending
    FIFO = "fifo"  # behind its queue's head
    GANG_TIMEOUT = "gang-timeout"  # a gang short of pods past its timeout
    MIN_MEMBER = "min-member"  # a gang that has fewer pods than its minimum
    GPU_SLICES = "gpu-slices"  # no set of nodes and GPUs holds the gang
    TOPOLOGY = "topology"  # no node set of the asked topology holds it
    CPU_MEMORY = "cpu-memory"  # GPUs free but not the CPU or memory beside them
    NODE_SELECTOR = "node-selector"  # a node the pod's selector or required affinity refuses
    TAINTS = "taints"  # a node with a taint the pod does not tolerate
    GPU_MEMORY = "gpu-memory"  # no shared GPU with the replicas and declared memory free
    MIG_REPARTITION = "mig-repartition"  # waits for MIG instances a repartition creates
    RECLAIM = "reclaim"  # withdrawn by reclaim before it started
    RESERVATION = "reservation"  # found no room; holds the nodes where it fits soonest
    RECLAIM_GRACE = "reclaim-grace"  # reclaim waits for borrowed work about to end
    RECLAIM_SPARING = "reclaim-sparing"  # reclaim spares a gang many times the reclaimer
    CYCLE_BUDGET = "cycle-budget"  # not tried: the cycle placed its budget of pods
    MIN_RUNTIME = "min-runtime"  # preemption waits for its victims' minimum runtime


@dataclass(frozen=True, slots=True)
class PendingReason:
    stage: Stage
    plugin: Plugin
    message: str
    # the flavor it waits for; for a quota reason, the quota key it is short in
    flavor: FlavorName | QuotaKey | None = None
    # GPUs of a dynamic MIG pool whose repartition could make the instance that is missing
    # (placement says so in its message too; metrics and explain read this)
    repartition_gpus: int = 0
    # for a quota reason, the limit it ran into first (quota.Limit's value): the idle
    # accounting tells nominal quota, borrowing limit and cohort lending apart by it
    limit: str | None = None

    def __str__(self) -> str:
        return f"{self.stage}/{self.plugin}: {self.message}"


@dataclass(frozen=True, slots=True)
class Admission:
    workload: str
    queue: str
    pods: tuple[PodAssignment, ...]
    # Slices per flavor this admission charges to the queue.
    charged: tuple[tuple[FlavorName, int], ...]
    # What the queue then holds past nominal, per quota key it charged (slices of a flavor,
    # parts of a GPU unit: `core.policy.GpuUnit`).
    borrowed: tuple[tuple[QuotaKey, int], ...] = ()
    # Only when preemption made room: these workloads must be gone before the pods start.
    after_evictions: tuple[str, ...] = ()
    stage: Stage = Stage.QUOTA


@dataclass(frozen=True, slots=True)
class Eviction:
    workload: str
    queue: str
    cause: Cause
    by: str
    message: str
    # Only these pods (an elastic gang's surplus: it keeps running); empty: the whole gang.
    pods: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Repartition:
    """A new MIG layout for one GPU (dynamic MIG): the instances in use stay where they are;
    `destroyed` free instances make way for `created` ones. The driver reconfigures the GPU
    (unavailable meanwhile) and the queued work that asked for it is placed afterwards."""

    node: str
    gpu: int
    layout: tuple[Instance, ...]
    created: tuple[Instance, ...]
    destroyed: tuple[Instance, ...]
    reason: str

    @property
    def gpu_id(self) -> str:
        return f"{self.node}/gpu{self.gpu}"


@dataclass(frozen=True, slots=True)
class Pending:
    workload: str
    queue: str
    reason: PendingReason
    # Other reasons met on the way (one per flavor tried), for `explain`.
    tried: tuple[PendingReason, ...] = ()


@dataclass(frozen=True, slots=True)
class CycleStats:
    attempted: int = 0
    admitted: int = 0
    pods_placed: int = 0
    evicted: int = 0
    pending: int = 0
    # workloads not tried because the cycle placed its budget of pods: the next cycle
    # should come at once
    deferred: int = 0


class IdleCause(StrEnum):
    """Why free capacity was not used while work waited (engine.idle)."""

    NOTHING_WAITING = "nothing-waiting"  # no waiting work could use it
    NOMINAL_QUOTA = "nominal-quota"  # the work waits for its queue's nominal quota
    BORROWING_LIMIT = "borrowing-limit"
    COHORT_LENDING = "cohort-lending"  # the cohort has less to lend than it must borrow
    GANG_LARGER = "gang-larger-than-free"  # it needs more than is free in all
    FRAGMENTATION = "fragmentation"  # enough is free in all, not where one placement fits
    TOPOLOGY = "topology"
    CPU_MEMORY = "cpu-memory"
    MIG_LAYOUT = "mig-layout"  # free instances of a profile nobody waits for; others wait
    SHARING_MODE = "sharing-mode"  # work waits for this model shared another way
    QUEUE_ORDER = "queue-order"  # behind its queue's head
    RESERVATION = "reservation"
    RECLAIM_GRACE = "reclaim-grace"  # reclaim waits for borrowed work about to end
    RECLAIM_SPARING = "reclaim-sparing"  # reclaim spares a gang many times the reclaimer
    CYCLE_BUDGET = "cycle-budget"  # not tried yet: the cycle placed its budget of pods
    OTHER = "other"  # a gang short of pods, an admission withdrawn


@dataclass(frozen=True, slots=True)
class Idle:
    """Free slices of a flavor after a cycle and why no waiting work took them: `workload` is
    the first waiting workload that could use them (empty for nothing-waiting and the
    mismatch causes), whose reason is the cause."""

    flavor: FlavorName
    cause: IdleCause
    slices: int
    workload: str = ""


@dataclass(frozen=True, slots=True)
class Reservation:
    """A waiting gang's reservation this cycle, for explain, metrics and status."""

    workload: str
    queue: str
    start: int  # when it is expected to fit
    nodes: tuple[str, ...]
    waits_for: tuple[str, ...]  # running work expected to end first (the last sets `start`)


@dataclass(frozen=True, slots=True)
class Drain:
    """A GPU kept free of new work this cycle so that it empties for a repartition
    (engine.drain)."""

    gpu_id: str
    until: int  # when the work on it is expected to end
    reason: str


@dataclass(frozen=True, slots=True)
class HeldIdle:
    """Running work whose GPUs its queue's idleness rule judges idle: since when, what that
    makes it (warned or reclaimable), and what follows, in words explain and Events show."""

    workload: str
    queue: str
    stage: IdleStage
    since: int
    # when it becomes reclaimable (None: already is, or never: the rule only warns, or its
    # work is within quota)
    reclaim_at: int | None
    message: str


@dataclass(frozen=True)
class CycleResult:
    now: int
    admissions: tuple[Admission, ...] = ()
    evictions: tuple[Eviction, ...] = ()
    pending: tuple[Pending, ...] = ()
    stats: CycleStats = field(default_factory=CycleStats)
    repartitions: tuple[Repartition, ...] = ()
    # MIG instances per profile still wanted after the repartitions (dynamic pools only)
    mig_unserved: tuple[tuple[str, int], ...] = ()
    # gangs that wait for room and the nodes they reserve (engine.reservation)
    reservations: tuple[Reservation, ...] = ()
    # every flavor's free slices after the cycle, by why no waiting work used them
    idle: tuple[Idle, ...] = ()
    # GPUs of dynamic MIG pools kept free of new work to empty for a repartition
    drains: tuple[Drain, ...] = ()
    # the usage book as of this cycle, for the next snapshot (scheduling.usageHalfLifeSeconds;
    # None when it is unset)
    usage: UsageBook | None = None
    # running work held idle past its queue's warning window (core.held_idle), by id
    held_idle: tuple[HeldIdle, ...] = ()

    def pending_reason(self, workload: str) -> PendingReason | None:
        for p in self.pending:
            if p.workload == workload:
                return p.reason
        return None

    def admitted_ids(self) -> list[str]:
        return [a.workload for a in self.admissions]

    def evicted_ids(self) -> list[str]:
        return [e.workload for e in self.evictions]


@dataclass(slots=True)
class Outcome:
    """How one admission attempt went (internal to the cycle)."""

    admitted: bool
    reason: PendingReason | None = None
    tried: tuple[PendingReason, ...] = ()
