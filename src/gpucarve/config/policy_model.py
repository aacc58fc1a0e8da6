"""The policy file's shape, as pydantic models (structure and types only).

Cross-field rules (a layout that fits the GPU, a quota that the pools can hold, a cohort that
exists) are checked in `policy_build`, where the catalog and MIG geometry are at hand. The JSON
Schema printed by `gpucarve policy schema` is generated from these classes.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from gpucarve.core.policy import DEFAULT_MAX_PODS_PER_CYCLE
from gpucarve.core.vocabulary import BLOCK_LABEL, RACK_LABEL

_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"

# Real-world bounds, checked before anything is built: the largest GPU clusters that exist
# hold some 200,000 GPUs in nodes of at most 16; a slice count is bounded by the cluster.
MAX_NODES_PER_POOL = 25_000
MAX_GPUS_PER_NODE = 16
MAX_SLICES = 10_000_000
# A 1 % share is the finest any GPU-sharing tool offers (HAMi's gpucores, MPS's thread
# percentage); more replicas only multiply the slices to track.
MAX_TIME_SLICING_REPLICAS = 100

Namespace = Annotated[str, Field(pattern=_NAME, max_length=63)]
SliceCount = Annotated[int, Field(ge=0, le=MAX_SLICES)]
InstanceCount = Annotated[int, Field(ge=0, le=64)]
GpuIndex = Annotated[int, Field(ge=0, le=MAX_GPUS_PER_NODE - 1)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


class Metadata(_Strict):
    name: str = Field(pattern=_NAME, max_length=63, description="Policy name (DNS label).")
    description: str = Field(default="", max_length=4096)


class TaintSpec(_Strict):
    key: str = Field(min_length=1, max_length=253)
    value: str = Field(default="", max_length=63)
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class TopologySpec(_Strict):
    nodesPerRack: int | None = Field(
        default=None,
        ge=1,
        le=MAX_NODES_PER_POOL,
        description="Consecutive nodes that share a rack label value.",
    )
    nodesPerNvlinkDomain: int | None = Field(
        default=None,
        ge=1,
        le=MAX_NODES_PER_POOL,
        description="Consecutive nodes that share an NVLink domain (1: NVLink inside a node).",
    )
    nodesPerBlock: int | None = Field(
        default=None,
        ge=1,
        le=MAX_NODES_PER_POOL,
        description="Consecutive nodes under one spine switch or cloud topology block "
        "(a multiple of nodesPerRack).",
    )


class MigGpuLayout(_Strict):
    gpus: list[GpuIndex] = Field(
        min_length=1,
        max_length=MAX_GPUS_PER_NODE,
        description="GPU indices on each node (0-based).",
    )
    layout: dict[str, InstanceCount] = Field(
        min_length=1, description="Profile counts, as mig-parted's mig-devices: {3g.40gb: 2}."
    )


class MigDynamicSpec(_Strict):
    enabled: bool = Field(default=True, description="Repartition this pool's GPUs on demand.")
    minSecondsBetweenChanges: int = Field(
        default=600, ge=0, le=7 * 86400, description="No GPU is repartitioned again sooner."
    )
    maxGpusPerCycle: int = Field(
        default=8, ge=1, le=10_000, description="GPUs one scheduling cycle may repartition."
    )
    profiles: list[str] | None = Field(
        default=None,
        max_length=64,
        description="Profiles the pool's GPUs may be carved into (each gets a flavor); "
        "default: those of its layouts.",
    )
    granularity: Literal["gpu", "instance"] = Field(
        default="gpu",
        description="gpu: only a GPU none of whose instances is in use is repartitioned (what "
        "the GPU Operator's MIG manager can do: mig-parted recreates every instance of a GPU "
        "it changes); instance: instances in use stay in place while free ones are reshaped "
        "(needs a node agent creating single GPU instances; simulator only).",
    )
    drain: bool = Field(
        default=False,
        description="With granularity gpu: when MIG work within its quota waits for "
        "instances nobody frees, keep new work off the GPUs expected to empty soonest so they "
        "can be repartitioned (their free instances idle meanwhile).",
    )


class MigSpec(_Strict):
    dynamic: MigDynamicSpec | None = Field(
        default=None,
        description="Dynamic MIG: the layout is where each GPU starts; gpucarve repartitions "
        "GPUs (keeping instances in use) when queued work needs other profiles.",
    )
    layout: dict[str, InstanceCount] | None = Field(
        default=None, description="One layout for every GPU of the pool: profile -> count."
    )
    perGpu: list[MigGpuLayout] | None = Field(
        default=None,
        max_length=MAX_GPUS_PER_NODE,
        description="Layouts per GPU index; every GPU index exactly once.",
    )
    strategy: Literal["mixed", "single"] = Field(
        default="mixed",
        description="The device plugin's MIG strategy on this pool: mixed publishes each profile "
        "as nvidia.com/mig-<profile>; single publishes every instance as nvidia.com/gpu (all "
        "instances of the pool one profile).",
    )


class PoolSpec(_Strict):
    name: str = Field(pattern=_NAME, max_length=40)
    gpuModel: str = Field(
        min_length=1, description="Catalog id, alias or GFD product label, e.g. A100-80GB."
    )
    nodes: int = Field(ge=1, le=MAX_NODES_PER_POOL)
    gpusPerNode: int = Field(ge=1, le=MAX_GPUS_PER_NODE)
    sharing: Literal["exclusive", "mig", "time-slicing", "mps"]
    replicas: int | None = Field(
        default=None,
        le=MAX_TIME_SLICING_REPLICAS,
        description="Replicas per GPU for time-slicing (2..100) and mps (2..48).",
    )
    renameByDefault: bool | None = Field(
        default=None,
        description="Time-slicing and mps: true (the default) publishes replicas as "
        "nvidia.com/gpu.shared; false as nvidia.com/gpu, as the NVIDIA device plugin does "
        "unless told to rename (pods written for it then ask nvidia.com/gpu).",
    )
    devices: Literal["device-plugin", "dra"] = Field(
        default="device-plugin",
        description="How the nodes hand GPUs to pods: device-plugin (extended resources such "
        "as nvidia.com/gpu) or dra (NVIDIA's DRA driver publishes the GPUs in ResourceSlices "
        "and pods claim them with ResourceClaims of device class gpu.nvidia.com; exclusive "
        "pools only).",
    )
    mig: MigSpec | None = None
    cpusPerNode: int | None = Field(default=None, ge=1, le=4096)
    memoryGiBPerNode: int | None = Field(default=None, ge=1, le=65_536)
    nodeLabels: dict[str, str] = Field(default={}, max_length=256)
    taints: list[TaintSpec] = Field(default=[], max_length=64)
    topology: TopologySpec = TopologySpec()
    pricePerGpuHour: float | None = Field(
        default=None, ge=0, description="Overrides the catalog's indicative USD price."
    )
    flavorPrefix: str | None = Field(
        default=None,
        pattern=_NAME,
        max_length=40,
        description="Overrides the model's flavor prefix (e.g. to keep two H100 pools apart).",
    )


class QuotaSpec(_Strict):
    # Whole slices for a flavor; GPUs (fractions allowed) for a GPU unit (a flavor prefix).
    nominal: int | float = Field(
        ge=0,
        le=MAX_SLICES,
        description="Slices of the flavor (or GPUs of the unit) guaranteed to the queue.",
    )
    borrowingLimit: int | float | None = Field(
        default=None,
        ge=0,
        le=MAX_SLICES,
        description="Most slices (or GPUs) borrowed from the cohort (absent: no limit).",
    )
    lendingLimit: int | float | None = Field(
        default=None,
        ge=0,
        le=MAX_SLICES,
        description="Most unused nominal slices (or GPUs) lent (absent: all of them).",
    )


class IdlenessSpec(_Strict):
    activityBelow: float = Field(
        gt=0,
        le=100,
        description="Percent GPU utilisation as the DCGM exporter reports it "
        "(DCGM_FI_DEV_GPU_UTIL: the share of time a kernel ran): a workload whose GPUs all "
        "stay below it is idle.",
    )
    warnAfterSeconds: int = Field(
        ge=60,
        le=7 * 86400,
        description="Idle this long, the workload is warned (an Event, a metric, explain) and "
        "goes first among the victims reclaim and preemption take.",
    )
    reclaimAfterSeconds: int | None = Field(
        default=None,
        ge=60,
        le=30 * 86400,
        description="Idle this long, work waiting for its GPUs may evict it, whatever its queue "
        "or priority, while its queue borrows what it holds. null (the default): it is only "
        "warned.",
    )
    withinQuota: Literal["warn", "reclaim"] = Field(
        default="warn",
        description="warn: work within the queue's nominal quota is only warned; reclaim: it "
        "may be reclaimed too (say so only for a queue whose users agreed to it).",
    )


class QueueSpec(_Strict):
    name: str = Field(pattern=_NAME, max_length=63)
    namespaces: list[Namespace] = Field(
        min_length=1, max_length=1000, description="Namespaces (DNS labels) whose pods use it."
    )
    cohort: str | None = None
    weight: float = Field(default=1.0, gt=0, le=1000, description="Fair-share weight.")
    quota: dict[str, QuotaSpec] = Field(
        description="Flavor name, or a GPU unit (a flavor prefix: GPUs of that model however "
        "carved) -> quota."
    )
    maxPerWorkload: dict[str, SliceCount] = Field(
        default={}, description="Flavor name -> most slices one workload may request."
    )
    priorityClasses: list[str] = Field(
        default=[], description="Allowed priority classes (empty: all)."
    )
    reclaimWaitSeconds: int | None = Field(
        default=None,
        ge=0,
        le=7 * 86400,
        description="The most this queue's work within its nominal quota waits for quota it "
        "lent: reclaim sparing large gangs (scheduling.reclaimLargeVictimRatio) and reclaim "
        "grace (scheduling.reclaimGraceSeconds) hold off for it no longer (0: they never "
        "hold its reclaims off). null (the default): the scheduling settings' own bounds.",
    )
    idleness: IdlenessSpec | None = Field(
        default=None,
        description="When this queue's running work counts as holding its GPUs idle, and what "
        "follows (absent: its work is never judged idle).",
    )


class CohortSpec(_Strict):
    name: str = Field(pattern=_NAME, max_length=63)
    description: str = Field(default="", max_length=4096)
    parent: str | None = Field(
        default=None,
        description="The cohort this one sits in (absent: a root). What its members do not "
        "use goes to each other first, then up the tree; a cohort borrows from its parent "
        "and lends it what it does not use.",
    )
    quota: dict[str, QuotaSpec] = Field(
        default={},
        max_length=256,
        description="Flavor name or GPU unit -> the cohort's own quota: nominal capacity of "
        "its own, the most it borrows from its parent (borrowingLimit) and the most of its "
        "members' unused quota it lends its parent (lendingLimit; absent: all of it).",
    )
    weight: float = Field(
        default=1.0, gt=0, le=1000, description="Fair-share weight against its siblings."
    )
    reclaimForMembers: bool = Field(
        default=True,
        description="Whether a member queue past its own nominal quota may take back "
        "(reclaim) what queues outside this cohort borrow while this cohort stays within what "
        "it holds (true: a department's unused quota is its teams'); false: only a queue "
        "within its own nominal quota reclaims, as in a flat cohort (fewer evictions).",
    )


class PriorityClassSpec(_Strict):
    name: str = Field(pattern=_NAME, max_length=63)
    value: int = Field(ge=-2_147_483_648, le=1_000_000_000)
    preemptible: bool
    default: bool = False
    description: str = Field(default="", max_length=4096)


class TopologyKeysSpec(_Strict):
    rack: str = RACK_LABEL
    nvlinkDomain: str = "nvidia.com/gpu.clique"
    block: str = BLOCK_LABEL


class SchedulingSpec(_Strict):
    queueing: Literal["best-effort-fifo", "strict-fifo"] = Field(
        default="best-effort-fifo",
        description="best-effort-fifo: work behind a blocked head may go first until the head "
        "has waited maxHeadWaitSeconds; strict-fifo: never.",
    )
    maxHeadWaitSeconds: int = Field(default=900, ge=0, le=7 * 86400)
    minRuntimeSeconds: int = Field(
        default=300,
        ge=0,
        le=7 * 86400,
        description="No preemption before a workload ran this long.",
    )
    preemption: bool = Field(default=True, description="Allow reclaim and priority preemption.")
    gang: bool = Field(
        default=True,
        description="All-or-nothing gangs. false places pods one by one as kube-scheduler does "
        "(for baselines): placed pods hold their GPUs while the rest of the gang waits.",
    )
    reserveAfterSeconds: int | None = Field(
        default=None,
        ge=0,
        le=30 * 86400,
        description="A gang that found no room and has waited this long reserves the nodes where "
        "it will fit soonest (by when the work there is expected to end); meanwhile only work "
        "expected to end before then, or that leaves it room, may use them. null (the "
        "default): never; see docs/engine.md for what it trades.",
    )
    defaultRuntimeSeconds: int = Field(
        default=86400,
        ge=60,
        le=365 * 86400,
        description="How long work is taken to run when it declares nothing "
        "(gpucarve.io/expected-runtime, a Job's activeDeadlineSeconds) and too little of its "
        "kind has finished to learn from.",
    )
    reclaimLargeVictimRatio: int | None = Field(
        default=4,
        ge=1,
        le=1000,
        description="Reclaim spares a whole gang more than this many times the reclaimer's "
        "size (a 32-GPU gang for a 4-GPU job) until the reclaimer has waited "
        "reclaimLargeVictimAfterSeconds (or its queue's reclaimWaitSeconds). null: no gang is "
        "spared; see docs/engine.md for what it trades.",
    )
    reclaimLargeVictimAfterSeconds: int = Field(
        default=43200,
        ge=0,
        le=7 * 86400,
        description="How long a queue within its nominal quota may wait before reclaim evicts "
        "a gang many times its size: the bound on how late its guarantee comes.",
    )
    reclaimGraceSeconds: int | None = Field(
        default=7200,
        ge=1,
        le=86400,
        description="Reclaim puts off evicting borrowed work that is expected to end within "
        "this many seconds (by its deadline, declared or learned runtime; never the default), "
        "until the reclaimer has waited this long (or its queue's reclaimWaitSeconds): work "
        "about to finish is not thrown away. null: reclaim never waits.",
    )
    reclaimPastBudgetAfterSeconds: int | None = Field(
        default=300,
        ge=0,
        le=7 * 86400,
        description="On Kubernetes, reclaim evicts borrowed work through the Eviction API, so "
        "a PodDisruptionBudget may refuse it; once a victim's budget has refused for this "
        "many seconds, the pod is deleted instead (a DisruptionTarget condition and a "
        "ReclaimedPastBudget Event say why). 0: at once. null: a budget holds reclaim off for "
        "ever, and with it the lenders' nominal quota. Priority preemption, moves and GPU "
        "health evictions always honour budgets.",
    )
    consolidateMaxMoves: int | None = Field(
        default=None,
        ge=1,
        le=64,
        description="Consolidation: a gang that quota admits but that no set of nodes holds may "
        "have up to this many running workloads moved (evicted, and re-placed by their "
        "controllers) per cycle, when the trial shows each of them fits elsewhere and the GPU "
        "time the gang gains by starting now exceeds the progress they lose. null (the "
        "default): no consolidation; see docs/engine.md for what it trades.",
    )
    loansWaitForLenders: bool = Field(
        default=False,
        description="A queue's unused nominal quota is not lent while work of that queue that "
        "fits within it waits (for room on the nodes, say): a loan made then would be "
        "reclaimed as soon as that work finds room, throwing the borrower's progress away. "
        "The borrower waits instead, with a reason that names the lender. false (the "
        "default): whatever is unused is lent; see docs/engine.md for what it trades.",
    )
    usageHalfLifeSeconds: int | None = Field(
        default=None,
        ge=60,
        le=90 * 86400,
        description="Fair share over time: queues take turns by what they borrow now plus what "
        "they borrowed recently, each moment's share weighing half as much this many seconds "
        "later, so a queue that borrowed the cohort all night yields in the morning to one "
        "that did not. null (the default): by what they borrow now.",
    )
    maxPodsPerCycle: int | None = Field(
        default=DEFAULT_MAX_PODS_PER_CYCLE,
        ge=1,
        le=10_000_000,
        description="Once a cycle has placed this many pods, the work it has not tried yet waits "
        "for the next cycle, which starts at once (in the order it would have been tried): a "
        "backlog is worked through in bounded cycles instead of one long one. null: no bound.",
    )
    scoring: dict[str, Annotated[int, Field(ge=0, le=100)]] = Field(
        default_factory=dict,
        description="Weight per score plugin, by name (0-100; 0 leaves one out): binpack (fill "
        "nodes and GPUs already in use; default 1), spread (prefer the emptiest nodes; default "
        "0), fragmentation (prefer the choice that least reduces room for the common request "
        "shapes; default 2). A plugin not named keeps its default; any score the engine "
        "registers may be named.",
    )
    victimOrder: str = Field(
        default="cheapest-first",
        description="Which running work preemption and reclaim try first, by the name of a "
        "victim order the engine registers. cheapest-first: lowest priority, then a surplus pod "
        "before a whole gang, then the least GPU-time lost, then the newest.",
    )
    candidatesPerPod: int = Field(
        default=16, ge=1, le=10_000, description="Feasible nodes scored per pod (search bound)."
    )
    boundElsewhere: Literal["keep", "evict"] = Field(
        default="keep",
        description="A GPU pod of a governed namespace that something else bound (another "
        "scheduler, nodeName): keep it, charged to its queue, or evict it (it is charged "
        "until it is gone).",
    )


class MonitoringSpec(_Strict):
    """Thresholds of the alerts `gpucarve render monitoring` writes (defaults: the seeds')."""

    gpuUtilizationLowPercent: int = Field(default=30, ge=1, le=100)
    gpuUtilizationLowForSeconds: int = Field(default=3600, ge=60, le=7 * 86400)
    gpuMemoryHighPercent: int = Field(default=90, ge=1, le=100)
    gpuMemoryHighForSeconds: int = Field(default=300, ge=60, le=86400)
    gpuTemperatureHighCelsius: int = Field(default=85, ge=30, le=120)
    gpuTemperatureHighForSeconds: int = Field(default=300, ge=60, le=86400)
    queueStarvedSeconds: int = Field(
        default=1800, ge=60, le=7 * 86400, description="Work waits and nothing is admitted."
    )
    gangStuckSeconds: int = Field(
        default=900, ge=60, le=7 * 86400, description="A gang waits short of its pods."
    )


class FaultClassSpec(_Strict):
    """A fault class's handling, where the policy differs from the catalogue's."""

    action: Literal["reset", "reboot", "replace", "wait", "report"] | None = Field(
        default=None,
        description="reset: the agent resets the GPU once nothing holds it; reboot: the agent "
        "asks for a node reboot (node condition GPURebootRequired); replace: out until a "
        "person clears it; wait: back once its checks are clean; report: never out of service.",
    )
    drain: Literal["evict", "finish"] | None = Field(
        default=None,
        description="evict: running pods are evicted within their disruption budgets; "
        "finish: they run on and only new work stops.",
    )


class GpuHealthSpec(_Strict):
    """What the node agent (`gpucarve node-agent`) takes a GPU out of service for."""

    checkSeconds: int = Field(default=60, ge=5, le=3600)
    temperatureCelsius: int = Field(default=90, ge=40, le=120)
    memoryErrors: int = Field(
        default=10, ge=1, le=1_000_000, description="Uncorrected ECC errors over a GPU's life."
    )
    cleanChecks: int = Field(
        default=3, ge=1, le=1000, description="Checks in a row without a fault before it is back."
    )
    xids: list[Annotated[int, Field(ge=1, le=65535)]] = Field(
        default=[48, 63, 64, 74, 79, 94, 95], max_length=256, description="Critical XID codes."
    )
    taint: Literal["allUnhealthy", "needsReset", "never"] = Field(
        default="allUnhealthy",
        description="When the node itself is tainted: when all its GPUs are out, also when one "
        "needs a reset, or never (the scheduler skips unhealthy GPUs' slices either way).",
    )
    evictPods: bool | None = Field(
        default=None,
        description="Evict running pods whose GPU was taken out of service (through the "
        "Eviction API, so PodDisruptionBudgets hold): true for every fault class, false never "
        "(they are only reported), null (the default) as each class's `drain` says.",
    )
    classes: dict[str, FaultClassSpec] = Field(
        default_factory=dict,
        max_length=64,
        description="Per fault class (fallen-off-bus, device-lost, uncontained-memory, "
        "contained-memory, memory-uncorrected, remap-pending, remap-failed, nvlink, "
        "memory-worn, other-xid, thermal, throttled), its action and drain where they differ "
        "from NVIDIA's guidance that gpucarve follows by default.",
    )
    maxOutOfService: int | str = Field(
        default="50%",
        description="A pool's budget: at most this many of its GPUs (or this percentage, "
        '"25%") out of service at once, so a fleet-wide event cannot take the pool down; '
        "faults past it are reported and the GPUs keep working. GPUs that run nothing (fatal "
        "classes) are out whatever the budget.",
    )
    flapLimit: int = Field(
        default=3,
        ge=2,
        le=100,
        description="A GPU that fails this many times within flapWindowSeconds stays out of "
        "service until a person clears it (`gpucarve.io/unhealthy-gpus` removed from the Node).",
    )
    flapWindowSeconds: int = Field(default=3600, ge=60, le=30 * 86400)


class AutoscaleSpec(_Strict):
    """An inference Deployment scaled on GPU utilisation and request latency (seed 2's HPA):
    `gpucarve render autoscaling` writes its HorizontalPodAutoscaler and the
    prometheus-adapter rules behind its metrics; `gpucarve simulate` replays its scaling."""

    deployment: str = Field(pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", max_length=253)
    namespace: Namespace
    queue: str | None = Field(
        default=None, description="Its pods' queue label, where the namespace has several."
    )
    minReplicas: int = Field(default=1, ge=1, le=1000)
    maxReplicas: int = Field(ge=1, le=1000)
    resources: dict[str, int] = Field(
        min_length=1,
        max_length=8,
        description="What one replica's pod requests (nvidia.com/gpu, a MIG profile…), as "
        "its Deployment says; the simulator's replicas ask for the same.",
    )
    priorityClass: str | None = Field(
        default=None, description="The Deployment's pods' priority class (default: the policy's)."
    )
    gpuUtilizationPercent: int = Field(
        default=70, ge=1, le=100, description="Average DCGM GPU utilisation per pod to keep."
    )
    requestLatencyMs: int | None = Field(
        default=None,
        ge=1,
        le=600_000,
        description="Latency to keep at latencyQuantile (off: none).",
    )
    latencyMetric: str = Field(
        default="request_latency_ms",
        pattern=r"^[a-zA-Z_:][a-zA-Z0-9_:]*$",
        max_length=200,
        description="The histogram (its _bucket series) the inference server exports.",
    )
    latencyQuantile: float = Field(default=0.95, ge=0.5, le=0.999)
    scaleUpStabilizationSeconds: int = Field(default=60, ge=0, le=3600)
    scaleDownStabilizationSeconds: int = Field(default=300, ge=0, le=3600)


class ObjectiveSpec(_Strict):
    """What `simulate --recommend` optimises and what may give for it; the scheduler does
    not read it."""

    minimize: Literal["wasted-gpu-hours", "lost-gpu-hours", "idle-gpu-hours"] = Field(
        default="wasted-gpu-hours",
        description="The figure a recommended policy is ranked by: lost-gpu-hours (work "
        "preemption threw away), idle-gpu-hours (free while work waited) or their sum, "
        "wasted-gpu-hours (the default).",
    )
    waitP95Seconds: dict[Namespace, Annotated[int, Field(ge=0, le=365 * 86400)]] = Field(
        default={},
        max_length=10_000,
        description="Queue name -> the longest its work's wait p95 may be under a recommended "
        "policy (what may give for the objective). A queue not named may wait (p95) no longer "
        "than under the policy as read, plus unnamedWaitGrowth of that.",
    )
    unnamedWaitGrowth: float = Field(
        default=0.1,
        ge=0,
        le=10,
        description="How much longer (a share: 0.1 is 10 %) the wait p95 of a queue that "
        "waitP95Seconds does not name may grow under a recommended policy.",
    )


class PolicySpec(_Strict):
    """A gpucarve policy: node pools, queues with quotas, cohorts and priority classes."""

    apiVersion: Literal["gpucarve.io/v1alpha1"]
    kind: Literal["Policy"]
    metadata: Metadata
    topologyKeys: TopologyKeysSpec = TopologyKeysSpec()
    pools: list[PoolSpec] = Field(min_length=1, max_length=1000)
    cohorts: list[CohortSpec] = Field(default=[], max_length=1000)
    queues: list[QueueSpec] = Field(default=[], max_length=10_000)
    priorityClasses: list[PriorityClassSpec] = Field(default=[], max_length=1000)
    scheduling: SchedulingSpec = SchedulingSpec()
    monitoring: MonitoringSpec = MonitoringSpec()
    gpuHealth: GpuHealthSpec = GpuHealthSpec()
    autoscaling: list[AutoscaleSpec] = Field(default=[], max_length=1000)
    objective: ObjectiveSpec = ObjectiveSpec()


def policy_json_schema() -> dict[str, object]:
    schema = PolicySpec.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://gpucarve.io/schemas/policy-v1alpha1.json"
    return schema
