"""The scheduler's Prometheus metrics (`prometheus_client`, in a registry of their own so that
two schedulers in one process, or tests, never share counters).

Names follow Prometheus' conventions: prefix `gpucarve_`, base units (seconds, slices), counters
end in `_total`. Labels are bounded by the policy (queue, flavor, pool, cohort, cause, reason
stage), never pods or workloads. What a cycle shows is set from its snapshot and result
(`observe_cycle`, pure arithmetic on the engine's values); what the driver sees happen (a
binding's latency, a repartition's outcome, a policy reload) is counted where it happens.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence

from prometheus_client import CollectorRegistry, Gauge, Histogram
from prometheus_client import Counter as PromCounter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from gpucarve.core.amounts import FlavorName, QuotaKey
from gpucarve.core.gpu_faults import Fault
from gpucarve.core.held_idle import IdleStage
from gpucarve.core.policy import Policy
from gpucarve.core.snapshot import Snapshot
from gpucarve.core.workload import Workload
from gpucarve.engine import SCALE, Quotas, usage_after
from gpucarve.engine.decisions import CycleResult, Idle, PendingReason, Plugin, Stage
from gpucarve.metrics.fragmentation import pool_slices

WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400)
CYCLE_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
BIND_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
# completion time over run time: 1 is no wait at all
SLOWDOWN_BUCKETS = (1, 1.1, 1.25, 1.5, 2, 3, 5, 10, 20, 50, 100)
SEEN_LIMIT = 200_000  # workloads remembered for first-try admission


def reason_stage(reason: PendingReason) -> str:
    """The bounded reason label of a pending workload: quota, fair-share, gang, topology,
    device, repartition, preemption or validation."""
    if reason.plugin in (Plugin.GANG_TIMEOUT, Plugin.MIN_MEMBER):
        return "gang"
    if reason.stage is Stage.QUEUEING:
        return "fair-share"
    if reason.stage is Stage.PLACEMENT:
        if reason.plugin is Plugin.TOPOLOGY:
            return "topology"
        if reason.plugin is Plugin.MIG_REPARTITION or reason.repartition_gpus:
            return "repartition"
        return "device"
    return str(reason.stage)


class LastCycleGauges(Collector):
    """Gauges counted when they are read (a scrape) from the last cycle's snapshot and
    decisions, once per cycle read: the slices per pool (a pass over every slice: at 5,000
    nodes a twelfth of a cycle's time, and when it ran in the loop the tail of binding
    latency) and each queue's quota, use, borrowing and lending (a pass over every running
    pod). Prometheus reads them every 15-30 s; the loop cycles many times a second under load."""

    def __init__(self) -> None:
        self._basis: tuple[Snapshot, CycleResult] | None = None
        self._counted: tuple[object, list[GaugeMetricFamily]] | None = None
        self._lock = threading.Lock()

    def observe(self, snapshot: Snapshot, result: CycleResult) -> None:
        self._basis = (snapshot, result)  # one reference, replaced whole

    def collect(self) -> Iterator[GaugeMetricFamily]:
        basis = self._basis
        with self._lock:
            counted = self._counted
            if counted is None or counted[0] is not basis:
                families = [] if basis is None else [*_pool_families(*basis), *_quota(*basis)]
                counted = (basis, families)
                self._counted = counted
        yield from counted[1]


def _pool_families(snapshot: Snapshot, result: CycleResult) -> list[GaugeMetricFamily]:
    slices = GaugeMetricFamily(
        "gpucarve_pool_slices",
        "Slices per pool and flavor, allocated or free",
        labels=["pool", "flavor", "state"],
    )
    fragmented = GaugeMetricFamily(
        "gpucarve_pool_fragmented_slices",
        "Free slices no waiting request shape can use",
        labels=["pool", "flavor"],
    )
    for (pool, flavor), counts in sorted(pool_slices(snapshot, result).items()):
        slices.add_metric([pool, flavor, "allocated"], counts.allocated)
        slices.add_metric([pool, flavor, "free"], counts.free)
        fragmented.add_metric([pool, flavor], counts.fragmented)
    return [slices, fragmented]


def _quota(snapshot: Snapshot, result: CycleResult) -> list[GaugeMetricFamily]:
    qf = ["queue", "flavor"]
    nominal = GaugeMetricFamily(
        "gpucarve_queue_nominal_slices", "Nominal quota (GPUs for a GPU unit)", labels=qf
    )
    usage = GaugeMetricFamily(
        "gpucarve_queue_usage_slices", "Slices in use (GPUs for a GPU unit)", labels=qf
    )
    borrowed = GaugeMetricFamily(
        "gpucarve_queue_borrowed_slices", "Slices (GPUs of a unit) beyond nominal", labels=qf
    )
    lent_family = GaugeMetricFamily(
        "gpucarve_queue_lent_slices",
        "Slices of the queue's unused nominal quota that its cohort's borrowers use",
        labels=qf,
    )
    policy = snapshot.policy
    quotas = Quotas(policy, dict(usage_after(snapshot.running, result)))
    lent = _lent(policy, quotas)
    for q in policy.queues:
        for quota in q.quotas:
            f = quota.flavor
            # a GPU unit's quota is reported in GPUs, a flavor's in slices
            unit = policy.units.get(f)
            per = 1 if unit is None else unit.parts_per_gpu
            nominal.add_metric([q.name, f], quota.nominal / per)
            usage.add_metric([q.name, f], quotas.used(q.name, f) / per)
            borrowed.add_metric([q.name, f], quotas.borrowed(q.name, f) / per)
            lent_family.add_metric([q.name, f], lent.get((q.name, f), 0) / per)
    return [nominal, usage, borrowed, lent_family, *_cohort_levels(policy, quotas)]


def _cohort_levels(policy: Policy, quotas: Quotas) -> list[GaugeMetricFamily]:
    """In a cohort tree, per cohort and quota key: what it holds (its own nominal and what its
    members lend it), what its members draw of it and what it borrows from its parent."""
    tree = quotas.tree
    if tree is None:
        return []
    cf = ["cohort", "flavor"]
    holds = GaugeMetricFamily(
        "gpucarve_cohort_holds_slices",
        "What a cohort holds: its own nominal and what its members lend it (GPUs for a unit)",
        labels=cf,
    )
    drawn = GaugeMetricFamily(
        "gpucarve_cohort_usage_slices",
        "What a cohort's members draw of it, past their guaranteed parts",
        labels=cf,
    )
    borrowed = GaugeMetricFamily(
        "gpucarve_cohort_borrowed_slices",
        "What a cohort draws from its parent beyond what it holds",
        labels=cf,
    )
    for (cohort, key), lvl in sorted(tree.levels.items()):
        unit = policy.units.get(key)
        per = 1 if unit is None else unit.parts_per_gpu
        used = quotas.pool_used(cohort, key)
        holds.add_metric([cohort, key], lvl.subtree / per)
        drawn.add_metric([cohort, key], used / per)
        borrowed.add_metric([cohort, key], max(0, used - lvl.subtree) / per)
    return [holds, drawn, borrowed]


class SchedulerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        q = ["queue"]
        self.elsewhere = Gauge(
            "gpucarve_pods_bound_elsewhere",
            "GPU pods of a governed namespace bound by something other than gpucarve",
            q,
            registry=r,
        )
        self.pending = Gauge(
            "gpucarve_pending_workloads",
            "Workloads waiting, by the stage that holds them",
            ["queue", "reason"],
            registry=r,
        )
        self.reserving = Gauge(
            "gpucarve_reserving_workloads",
            "Waiting gangs holding a reservation (scheduling.reserveAfterSeconds)",
            q,
            registry=r,
        )
        self.draining = Gauge(
            "gpucarve_mig_draining_gpus",
            "GPUs of a dynamic MIG pool kept free of new work to empty for a repartition "
            "(mig.dynamic.drain)",
            ["pool"],
            registry=r,
        )
        self.held_idle = Gauge(
            "gpucarve_workloads_held_idle",
            "Running workloads whose GPUs their queue's idleness rule judges idle, by stage "
            "(warned: past warnAfterSeconds; reclaimable: waiting work may evict them)",
            ["queue", "stage"],
            registry=r,
        )
        self.recent_share = Gauge(
            "gpucarve_queue_recent_borrowed_share",
            "What the queue borrowed recently, as a share of its cohort decayed by "
            "scheduling.usageHalfLifeSeconds (0 to 1; absent without a half-life)",
            q,
            registry=r,
        )
        self.reserved_start = Gauge(
            "gpucarve_reservation_start_seconds",
            "Seconds until the latest expected start among the queue's reservations",
            q,
            registry=r,
        )
        self.idle = PromCounter(
            "gpucarve_idle_gpu_seconds",
            "GPU-seconds free, by why no waiting work used them (nothing-waiting: none could)",
            ["pool", "cause"],
            registry=r,
        )
        # the last cycle's idle shares, held until the next cycle: (when, shares)
        self._idle_since: tuple[int, tuple[Idle, ...]] | None = None
        self._flavor_pools: tuple[Policy, dict[FlavorName, tuple[str, float]]] | None = None
        self.completion = Histogram(
            "gpucarve_completion_seconds",
            "Submission to the end of a workload whose pods all Succeeded",
            q,
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.runtime = Histogram(
            "gpucarve_runtime_seconds",
            "Start to the end of a workload whose pods all Succeeded (what reservations learn)",
            q,
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.slowdown = Histogram(
            "gpucarve_slowdown",
            "Completion time over run time of a workload whose pods all Succeeded (its last "
            "run: work evicted and run again counts the wait before it)",
            q,
            buckets=SLOWDOWN_BUCKETS,
            registry=r,
        )
        self.wait = Histogram(
            "gpucarve_admission_wait_seconds",
            "Submission to admission",
            q,
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        # shadow mode (`kube/scheduler/shadow.py`): what gpucarve would have done meanwhile
        self.shadow_ahead = Gauge(
            "gpucarve_shadow_ahead_slices",
            "Slices of waiting workloads a shadow gpucarve would have started by now",
            q,
            registry=r,
        )
        self.shadow_ahead_seconds = PromCounter(
            "gpucarve_shadow_ahead_slice_seconds",
            "Slice-seconds a shadow gpucarve would have put to work while the real scheduler "
            "kept the work waiting",
            q,
            registry=r,
        )
        self.shadow_lead = Histogram(
            "gpucarve_shadow_start_lead_seconds",
            "How much sooner a shadow gpucarve would have started a workload than the real "
            "scheduler did (0: no sooner)",
            q,
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.gang_admissions = PromCounter(
            "gpucarve_gang_admissions_total",
            "Gangs (workloads of more than one pod) admitted, by whether it was their first try",
            ["queue", "first_try"],
            registry=r,
        )
        self.evictions = PromCounter(
            "gpucarve_evictions_total", "Evictions", ["queue", "cause"], registry=r
        )
        self.lost = PromCounter(
            "gpucarve_evicted_gpu_seconds_total",
            "GPU time the evicted pods had run (in whole-GPU seconds)",
            ["queue", "cause"],
            registry=r,
        )
        self.repartitions = PromCounter(
            "gpucarve_repartitions_total",
            "MIG repartitions by outcome (started, succeeded, failed)",
            ["pool", "result"],
            registry=r,
        )
        self.last_cycle = LastCycleGauges()
        r.register(self.last_cycle)
        self.cycle = Histogram(
            "gpucarve_cycle_duration_seconds",
            "One scheduling cycle",
            buckets=CYCLE_BUCKETS,
            registry=r,
        )
        self.binding = Histogram(
            "gpucarve_binding_duration_seconds",
            "One binding call to the API server",
            buckets=BIND_BUCKETS,
            registry=r,
        )
        self.reloads = PromCounter(
            "gpucarve_policy_reloads_total", "Policy reloads", ["result"], registry=r
        )
        self.leader = Gauge(
            "gpucarve_leader", "1 while this replica leads (or runs without election)", registry=r
        )
        self.out_of_service = Gauge(
            "gpucarve_gpus_out_of_service",
            "GPUs out of service for a fault the node agents found (no new work placed on "
            "them), within the pool's gpuHealth.maxOutOfService",
            ["pool"],
            registry=r,
        )
        self.out_by_class = Gauge(
            "gpucarve_gpus_out_of_service_by_class",
            "GPUs out of service, by the class of their fault",
            ["pool", "fault_class"],
            registry=r,
        )
        self.gpu_resets = PromCounter(
            "gpucarve_gpu_resets_total",
            "GPUs out of service that their node agent reset, by fault class",
            ["pool", "fault_class"],
            registry=r,
        )
        self.gpus_returned = PromCounter(
            "gpucarve_gpus_returned_total",
            "GPUs back in service after a fault, by fault class",
            ["pool", "fault_class"],
            registry=r,
        )
        self.time_out = Histogram(
            "gpucarve_gpu_out_of_service_seconds",
            "How long a GPU was out of service, from its fault to its return",
            ["pool", "fault_class"],
            buckets=(60, 300, 900, 1800, 3600, 4 * 3600, 12 * 3600, 86400, 3 * 86400, 7 * 86400),
            registry=r,
        )
        self.past_budget = Gauge(
            "gpucarve_gpu_faults_past_budget",
            "Faulty GPUs left in service because the pool's gpuHealth.maxOutOfService is spent",
            ["pool"],
            registry=r,
        )
        self.failed_gpu_evictions = PromCounter(
            "gpucarve_failed_gpu_evictions_total",
            "Pods evicted because their GPU was taken out of service (gpuHealth.evictPods)",
            registry=r,
        )
        self._seen: set[str] = set()  # workloads seen pending in an earlier cycle

    def observe_cycle(
        self,
        snapshot: Snapshot,
        result: CycleResult,
        duration_s: float,
        also_pending: Iterable[tuple[str, str]] = (),
    ) -> None:
        """`also_pending`: (queue, reason stage) of workloads waiting outside the cycle (pods
        no workload can be made of, gangs short of pods, admissions waiting for victims)."""
        self.cycle.observe(duration_s)
        policy = snapshot.policy
        pending: Counter[tuple[str, str]] = Counter(
            (p.queue, reason_stage(p.reason)) for p in result.pending
        )
        pending.update(also_pending)
        self.pending.clear()
        for q in policy.queues:
            self.pending.labels(q.name, "quota").set(0)  # present, so a query sees zeros
        for (queue, stage), n in sorted(pending.items()):
            self.pending.labels(queue, stage).set(n)
        self._reservations(policy, result)
        self._recent(policy, result)
        self._drains(snapshot, result)
        self._idle(snapshot, result)
        self._held_idle(policy, result)
        submitted = {w.id: w for w in snapshot.pending}
        for a in result.admissions:
            w = submitted.get(a.workload)
            if w is None:
                continue  # an elastic gang growing: not an admission
            self.wait.labels(a.queue).observe(max(0, result.now - w.submit_time))
            if w.pods > 1:
                first = "false" if w.id in self._seen else "true"
                self.gang_admissions.labels(a.queue, first).inc()
        self._evictions(snapshot, result)
        if len(self._seen) > SEEN_LIMIT:
            self._seen.clear()
        self._seen.update(p.workload for p in result.pending)
        self._seen.difference_update(a.workload for a in result.admissions)
        self.last_cycle.observe(snapshot, result)

    def _recent(self, policy: Policy, result: CycleResult) -> None:
        """Each queue's decayed borrowed share as the cycle left it (core.usage)."""
        self.recent_share.clear()
        if result.usage is None:
            return
        for q in policy.queues:
            share = result.usage.decayed.get(q.name, 0) / (SCALE * SCALE)
            self.recent_share.labels(q.name).set(share)

    def observe_finished(self, w: Workload, started: int, now: int) -> None:
        """A workload that ran to the end (its pods all Succeeded)."""
        self.completion.labels(w.queue).observe(max(0, now - w.submit_time))
        self.runtime.labels(w.queue).observe(max(0, now - started))
        self.slowdown.labels(w.queue).observe(max(0, now - w.submit_time) / max(1, now - started))

    def _held_idle(self, policy: Policy, result: CycleResult) -> None:
        self.held_idle.clear()
        for q in policy.queues:
            if q.idleness is not None:  # present, so a query sees zeros
                for stage in (IdleStage.WARNED, IdleStage.RECLAIMABLE):
                    self.held_idle.labels(q.name, stage.value).set(0)
        counts = Counter((h.queue, h.stage) for h in result.held_idle)
        for (queue, stage), n in sorted(counts.items()):
            self.held_idle.labels(queue, stage.value).set(n)

    def _idle(self, snapshot: Snapshot, result: CycleResult) -> None:
        """Each cycle's idle shares count from that cycle until the next (as the simulator
        sums them), in GPUs: slices times what one slice is worth."""
        since = self._idle_since
        self._idle_since = (result.now, result.idle)
        if since is None or result.now <= since[0]:
            return
        pools = self._pools_of(snapshot)
        seconds = result.now - since[0]
        for share in since[1]:
            pool, gpus = pools.get(share.flavor, ("none", 0.0))
            self.idle.labels(pool, share.cause.value).inc(share.slices * gpus * seconds)

    def _pools_of(self, snapshot: Snapshot) -> dict[FlavorName, tuple[str, float]]:
        """Flavor -> (its pool, pools joined by + when several serve it; GPUs per slice)."""
        cached = self._flavor_pools
        if cached is not None and cached[0] is snapshot.policy:
            return cached[1]
        node_pool = {n.name: n.pool for n in snapshot.cluster.nodes}
        pools: dict[FlavorName, set[str]] = {}
        for sl in snapshot.cluster.slices.values():
            pools.setdefault(sl.flavor, set()).add(node_pool[sl.node])
        flavors = snapshot.policy.flavors
        out = {
            f: ("+".join(sorted(ps)), flavors[f].compute_milli / 1000 if f in flavors else 0.0)
            for f, ps in pools.items()
        }
        self._flavor_pools = (snapshot.policy, out)
        return out

    def _reservations(self, policy: Policy, result: CycleResult) -> None:
        count: Counter[str] = Counter(r.queue for r in result.reservations)
        latest: dict[str, int] = {}
        for r in result.reservations:
            latest[r.queue] = max(latest.get(r.queue, 0), max(0, r.start - result.now))
        for q in policy.queues:
            self.reserving.labels(q.name).set(count[q.name])
            self.reserved_start.labels(q.name).set(latest.get(q.name, 0))

    def _drains(self, snapshot: Snapshot, result: CycleResult) -> None:
        drained: Counter[str] = Counter()
        if result.drains:  # the common case has none: no pass over every node
            pool_of = {n.name: n.pool for n in snapshot.cluster.nodes}
            drained.update(pool_of.get(d.gpu_id.rpartition("/gpu")[0], "") for d in result.drains)
        for pool in snapshot.policy.pools:
            if pool.mig_dynamic is not None:
                self.draining.labels(pool.name).set(drained[pool.name])

    def _evictions(self, snapshot: Snapshot, result: CycleResult) -> None:
        if not result.evictions:
            return  # the common case: no pass over every running workload
        running = {rw.workload.id: rw for rw in snapshot.running}
        policy = snapshot.policy
        for e in result.evictions:
            self.evictions.labels(e.queue, str(e.cause)).inc()
            rw = running.get(e.workload)
            if rw is None:
                continue
            going = set(e.pods)
            gpu_share = 0.0
            for p in rw.pods:
                if p.flavor is not None and (not going or p.pod in going):
                    gpu_share += policy.flavors[p.flavor].compute_milli * len(p.slice_ids) / 1000
            ran = max(0, result.now - rw.start_time)
            self.lost.labels(e.queue, str(e.cause)).inc(gpu_share * ran)

    def observe_elsewhere(self, per_queue: Mapping[str, int]) -> None:
        """GPU pods something other than gpucarve bound, charged to each queue."""
        self.elsewhere.clear()
        for queue, n in sorted(per_queue.items()):
            self.elsewhere.labels(queue).set(n)

    def observe_gpu_changes(
        self,
        snapshot: Snapshot,
        reset: Sequence[Fault],
        returned: Sequence[tuple[Fault, int]],
    ) -> None:
        if not reset and not returned:
            return  # the common case: no pass over every node
        pools = {n.name: n.pool for n in snapshot.cluster.nodes}

        def pool(f: Fault) -> str:
            return pools.get(f.gpu.rpartition("/")[0], "none")

        for f in reset:
            self.gpu_resets.labels(pool(f), f.fault_class).inc()
        for f, seconds in returned:
            self.gpus_returned.labels(pool(f), f.fault_class).inc()
            self.time_out.labels(pool(f), f.fault_class).observe(seconds)

    def observe_health(
        self,
        snapshot: Snapshot,
        out: Mapping[str, Fault],
        evicted: int,
        held: Mapping[str, Fault],
    ) -> None:
        """`out`: the GPUs out of service (`node/gpuN`); `held`: faulty, left in service."""
        by_pool: Counter[str] = Counter()
        by_class: Counter[tuple[str, str]] = Counter()
        past: Counter[str] = Counter()
        if out or held:  # the common case has none: no pass over every node
            pools = {n.name: n.pool for n in snapshot.cluster.nodes}
            for gpu, f in out.items():
                pool = pools.get(gpu.rpartition("/")[0], "none")
                by_pool[pool] += 1
                by_class[pool, f.fault_class] += 1
            past.update(pools.get(g.rpartition("/")[0], "none") for g in held)
        self.out_of_service.clear()
        self.past_budget.clear()
        for p in snapshot.policy.pools:
            self.out_of_service.labels(p.name).set(by_pool.get(p.name, 0))
            self.past_budget.labels(p.name).set(past.get(p.name, 0))
        self.out_by_class.clear()
        for (pool, cls), n in sorted(by_class.items()):
            self.out_by_class.labels(pool, cls).set(n)
        if evicted:
            self.failed_gpu_evictions.inc(evicted)


def _lent(policy: Policy, quotas: Quotas) -> dict[tuple[str, QuotaKey], int]:
    """What each queue's unused lendable quota serves of its cohort's borrowing: the cohort's
    borrowed slices are taken from its lenders in queue-name order (a split of a shared pool has
    no one true answer; this one is deterministic and adds up)."""
    out: dict[tuple[str, QuotaKey], int] = {}
    for cohort in {q.cohort for q in policy.queues if q.cohort is not None}:
        members = sorted(quotas.members.get(cohort, ()))
        flavors = {quota.flavor for m in members for quota in policy.queue(m).quotas}
        for f in sorted(flavors):
            borrowed = sum(quotas.borrowed(m, f) for m in members)
            for m in members:
                quota = policy.queue(m).quota(f)
                if quota is None or borrowed <= 0:
                    continue
                lendable = quota.lendable
                unused = max(0, min(lendable, quota.nominal - quotas.used(m, f)))
                give = min(unused, borrowed)
                out[(m, f)] = give
                borrowed -= give
    return out
