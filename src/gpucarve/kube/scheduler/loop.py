"""The gpucarve scheduler on a real API server: informers, the engine's cycle, then actions.

Each cycle rebuilds the snapshot from the informers' caches (`view.build_view`), runs the same
`Engine.run_cycle` as the simulator (handing it the step from the last snapshot where the view
tells it: `view_step`), and acts on the result: observe, decide, then the reactions the
scheduler is configured with (`reactions.REACTIONS`), each one duty. A change wakes a cycle at
once, except one that only shows this scheduler's own bindings as it made them (`confirms`).
The reactions, in order:

1. evictions first, through the Eviction API (PodDisruptionBudgets are honoured: a refused
   eviction is reported and asked again after the server's back-off; reclaim deletes a
   borrowed pod whose budget has refused past `reclaimPastBudgetAfterSeconds`); the workload
   that asked for them waits, out of the snapshot, until its victims are gone, so a slow exit
   never evicts more pods;
2. bindings (`binder`) through the pods/binding subresource, in parallel, each carrying
   the device-level choice as the `gpucarve.io/assignment` annotation; bindings made but not
   yet seen through the watch are kept as *assumed*, so the next cycle never hands their
   slices out again;
3. every pending pod gets `PodScheduled=False` with the engine's reason and a
   `FailedScheduling` Event, written only when the reason changes (best effort, in the
   background: a lost status write costs a stale message, never a wrong binding).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gpucarve.core.policy import DeviceApi, Policy
from gpucarve.core.snapshot import Snapshot
from gpucarve.core.usage import UsageBook
from gpucarve.engine import Engine, apply_cycle
from gpucarve.engine.invariants import InvariantViolation, check_step
from gpucarve.kube.api.client import ApiError, Client
from gpucarve.kube.api.informer import Informer
from gpucarve.kube.api.leader import LeaderElector
from gpucarve.kube.scheduler.binder import Binder
from gpucarve.kube.scheduler.bound_elsewhere import BoundElsewhere
from gpucarve.kube.scheduler.claim_writer import RESOURCE, ClaimWriter
from gpucarve.kube.scheduler.collector import Collector
from gpucarve.kube.scheduler.cycle_log import CycleLog
from gpucarve.kube.scheduler.device_config import DeviceConfigs
from gpucarve.kube.scheduler.device_taints import DeviceTaints
from gpucarve.kube.scheduler.evictions import (
    PastBudget,
    Refused,
    awaited_holds,
    with_held,
)
from gpucarve.kube.scheduler.failed_gpus import FailedGpuPods
from gpucarve.kube.scheduler.fraction_shares import ShareMarks
from gpucarve.kube.scheduler.gpu_service import GpuService
from gpucarve.kube.scheduler.health import Health
from gpucarve.kube.scheduler.held_idle import IdleMarks, IdleWatch, Told, marked_idle, under_rules
from gpucarve.kube.scheduler.mig_handoff import HandoffConfig, MigHandoff
from gpucarve.kube.scheduler.node_labels import label_nodes
from gpucarve.kube.scheduler.observed import Observer
from gpucarve.kube.scheduler.policy_reload import PolicyReloader
from gpucarve.kube.scheduler.queue_status import usage_as_kept
from gpucarve.kube.scheduler.reactions import REACTIONS, CycleReport, Decided, Reaction
from gpucarve.kube.scheduler.reporter import Reporter
from gpucarve.kube.scheduler.runtimes import RuntimeLearner
from gpucarve.kube.view.bound.bound_view import BoundGroups
from gpucarve.kube.view.bound.view_step import Layers, maybe_gone, step_between
from gpucarve.kube.view.cluster_view import View, build_view
from gpucarve.kube.view.cluster_view import key as pod_id
from gpucarve.kube.view.nodes.devices import DraDevices, read_slices
from gpucarve.kube.view.nodes.inventory import Inventory, build_inventory, node_key
from gpucarve.kube.view.pods.assigned import Assigned, assigned_of
from gpucarve.kube.view.pods.owner_kinds import (
    OWNER_KINDS,
    Watched,
    all_specs,
    watched,
)
from gpucarve.kube.view.pods.pod_facts import PodFactsMemo
from gpucarve.kube.view.pods.pod_index import PodIndex
from gpucarve.kube.view.pods.pods import WorkloadCache
from gpucarve.kube.view.short_gangs import ShortGangs
from gpucarve.metrics.scheduler_metrics import SchedulerMetrics

log = logging.getLogger("gpucarve.scheduler")


BINDINGS_WAIT_S = 1.0  # the longest a cycle's bindings hold the next cycle back
AWAITED_DISCOVER_S = 2.0  # how often CRDs are looked for while pods wait for their objects


def rest_s(most: float, ended: float, took: tuple[float, float], now: float) -> float:
    """How long the loop waits before the cycle a change asks for: what is left at `now` of a
    rest as long as the shorter of the last two cycles `took` (at most `most`), counted from
    the last one's end. A change after a quiet spell gets its cycle at once; under a stream of
    changes the loop spends about half of its time in cycles (the API server and the binder's
    threads share the machine), each gathering what arrived while the last one ran and
    rested. The shorter of two, so that one cycle slowed by the machine does not double its
    delay with as long a rest. A fixed 50 ms settle before each cycle made every pod wait for
    it, the first of a burst the longest."""
    return max(0.0, min(most, *took) - (now - ended))


@dataclass(frozen=True)
class SchedulerConfig:
    name: str = "gpucarve"  # the pods' spec.schedulerName
    interval_s: float = 2.0  # cycle at least this often (aging, retries) while pods wait
    # after a cycle the loop rests as long as the shorter of the last two took, at most this
    # long (`rest_s`)
    max_rest_s: float = 0.05
    discover_s: float = 30.0  # how often a missing owner kind's CRD is looked for again
    bind_workers: int = 16
    mig: HandoffConfig = field(default_factory=HandoffConfig)
    # Debug mode: check every rule on each cycle's decisions before acting on any of them
    # (engine.invariants); a broken rule stops the scheduler instead of binding.
    check_invariants: bool = False


@dataclass(frozen=True)
class Observed:
    """What a cycle decides on: the view, the snapshot the engine is given, the cycle's time
    (seconds from the epoch), and the pending workloads in a binding's back-off, with why."""

    view: View
    snapshot: Snapshot
    now: int
    backing: Mapping[str, str]


class Scheduler:
    def __init__(
        self,
        client: Client,
        policy: Policy,
        config: SchedulerConfig = SchedulerConfig(),
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        health: Health | None = None,
        reloader: PolicyReloader | None = None,
        metrics: SchedulerMetrics | None = None,
        reactions: Sequence[Reaction] = REACTIONS,
    ) -> None:
        self.client = client
        self.reactions = tuple(reactions)  # what each cycle's decisions are acted on by
        self.metrics = metrics or SchedulerMetrics()
        self.health = health
        self.reloader = reloader
        self.policy = policy
        self.cfg = config
        self.clock = clock
        # Decisions count seconds from here: pods created before start all count as time 0.
        self.epoch = clock()
        self._wake = threading.Event()
        # when the last cycle ended (monotonic), and how long the last two took (pacing only,
        # never read by a decision)
        self._last_cycles: tuple[float, tuple[float, float]] = (0.0, (0.0, 0.0))
        self.collector = Collector(time.monotonic)
        self.cycle_log = CycleLog(time.monotonic)
        self._observed: Layers | None = None  # the layers of the view the learner saw last
        self.pods = Informer(client, "/api/v1/pods", self._poke)
        self.nodes = Informer(client, "/api/v1/nodes", self._poke)
        # Dynamic Resource Allocation, read when a pool of the policy is DRA-managed (a
        # policy reload that adds one needs a restart to start these)
        self.dra = any(p.devices is DeviceApi.DRA for p in policy.pools)
        self.slices = Informer(client, f"{RESOURCE}/resourceslices", self._poke)
        self.claims = Informer(client, f"{RESOURCE}/resourceclaims", self._poke)
        # the objects that give gangs their size, one informer per owner kind that has them
        self.owner_watch = watched(OWNER_KINDS)
        self.owners = {name: Informer(client, w.path, self._poke) for name, w in self.owner_watch}
        self.served = set(self.owners)  # the kinds whose objects the API server serves
        self._discover_at = 0.0  # when to look again for CRDs installed meanwhile
        self.kinds_awaited: frozenset[str] = frozenset()  # kinds whose objects pods wait for
        # kind not served -> when it was last looked for (seconds from the epoch)
        self.unread: dict[str, int] = {}
        self.workloads = WorkloadCache()
        self.facts, self.bound = PodFactsMemo(self.epoch), BoundGroups()
        # the pods sorted as the view reads them, moved as the informer's changes say
        self.index = PodIndex(config.name, self.facts, policy.governed_namespaces())
        self.engine = Engine(rebuilt_views=True)
        # the snapshot the engine was last given and the layers of its view (`view_step`)
        self.fed: tuple[Snapshot, Layers] | None = None
        self.stepped = 0  # cycles whose snapshot carried that step (for tests and profiles)
        self.awaiting: dict[str, frozenset[str]] = {}  # workload -> victims still to go
        self.holding: dict[str, tuple[str, ...]] = {}  # workload -> the slices it was given
        # workload -> its victims whose eviction was refused (`Refused`)
        self.refused: dict[str, Refused] = {}
        self.past_budget = PastBudget(policy.scheduling.reclaim_past_budget_s)
        self.short_gangs = ShortGangs()
        self.runtimes = RuntimeLearner(self.metrics.observe_finished)
        # what the queues borrowed recently (scheduling.usageHalfLifeSeconds), carried from
        # cycle to cycle; read back from the Queues' statuses when this scheduler starts to lead
        self.usage = UsageBook()
        self.node_problems: set[str] = set()
        self.mig = MigHandoff(client, policy, config.mig, clock, self._repartitioned)
        self.dynamic_mig = any(p.mig_dynamic is not None for p in policy.pools)
        self._inventory: tuple[tuple[str, ...], Inventory] | None = None
        # the node and ResourceSlice caches' generations the inventory was checked at
        self._inventory_seen = (-1, -1)
        self._node_keys: dict[tuple[str, str], str] = {}  # (name, resourceVersion)
        self.reporter = Reporter(client, clock, self._uid_of)
        self.failed_gpus = FailedGpuPods(client, self.reporter)
        self.gpu_service = GpuService(client, self.reporter)
        self.device_taints = DeviceTaints(client)
        self.elsewhere = BoundElsewhere(client, self.reporter, self.metrics)
        self._warned: set[str] = set()  # the view's warnings logged already
        self.device_configs = DeviceConfigs(client)
        # the DRA devices of the last inventory: the binder's threads read this reference and
        # never build an inventory themselves
        self._dra_devices = DraDevices()
        writer = ClaimWriter(client, self.claims, lambda: self._dra_devices) if self.dra else None
        # a cycle asked for by the loop's own parts (a binding failed, a cycle deferred pods),
        # never skipped as a wake the informers' confirmations alone made (`_only_confirmed`)
        self._asked = False
        self._asking = threading.Lock()  # `_asked` is set by other threads
        self._others_seen: tuple[tuple[int, int], ...] = ()
        self.skipped = 0  # wakes that only confirmed bindings: no cycle (for tests and profiles)
        self.binder = Binder(
            client, self.pods, self.device_configs, self.metrics, self.ask,
            config.bind_workers, writer,
        )  # fmt: skip
        self.cycles = 0
        # told each cycle's decisions after they are acted on (the dashboard)
        self.observers: list[Observer] = []
        # GPU activity for the queues' idleness rules (--gpu-metrics-url; None: no readings,
        # so no workload is ever judged idle), and the idle stage each was last told of
        self.idle_watch: IdleWatch | None = None
        self.idle_told = Told()
        self.idle_marks = IdleMarks(client)
        self.share_marks = ShareMarks(client)  # bursting fractions' shares, on their pods

    def _poke(self) -> None:
        """An informer saw a change: a cycle soon."""
        self._wake.set()

    def ask(self) -> None:
        """A cycle soon, whatever the informers saw."""
        with self._asking:
            self._asked = True
        self._wake.set()

    def _others(self) -> tuple[tuple[int, int], ...]:
        """Where the informers other than the pods' stand (each by identity: a kind
        discovered later gets an informer of its own)."""
        informers = (self.nodes, self.slices, self.claims, *self.owners.values())
        return tuple((id(i), i.generation) for i in informers)

    def _only_confirmed(self) -> bool:
        """Whether all the informers saw since the last cycle is the watch showing pods bound
        where this scheduler bound them, as it still assumes them. The view is then the last
        one's, with those pods bound instead of assumed, so a cycle would decide nothing the
        last did not (as kube-scheduler's queueing hints let no binding's event requeue a
        pod); the next cycle anything else wakes reads them. In a stream of pods, half of the
        wakes were these."""
        if self._others() != self._others_seen:
            return False
        _, changes, _ = self.pods.changes_since(self.index.generation)
        with self.binder.lock:
            return confirms(changes, self.assumed)

    def _rest_s(self) -> float:
        ended, took = self._last_cycles
        return rest_s(self.cfg.max_rest_s, ended, took, time.monotonic())

    @property
    def assumed(self) -> dict[str, Assigned]:
        """Bindings made and not yet seen through the watch (read under `binder.lock`)."""
        return self.binder.assumed

    @property
    def failed_binds(self) -> list[str]:
        return self.binder.failed

    def _uid_of(self, pod: str) -> str | None:
        obj = self.pods.get(pod)
        return None if obj is None else obj["metadata"].get("uid")

    # ------------------------------------------------------------------ lifecycle
    def _informers(self) -> list[Informer]:
        return [
            self.nodes,
            self.pods,
            *((self.slices, self.claims) if self.dra else ()),
            *(self.owners[name] for name, _ in self.owner_watch if name in self.served),
        ]

    def _served(self, name: str, w: Watched, quiet: bool = False) -> bool:
        try:
            self.client.get(w.path + "?limit=1")
        except ApiError as err:
            if not w.expected and err.status == 403:
                if not quiet:
                    log.warning("%s; %s objects are not read", err, name)
                return False
            if err.status != 404:
                raise
            if w.expected and not quiet:
                # Without the CRD, pod groups are still gangs: of all their pods.
                log.warning(
                    "the %s CRD is not installed (run gpucarve apply): minMember unread", name
                )
            return False
        return True

    def _seconds(self) -> int:
        """Now, in whole seconds from the scheduler's epoch (the view's clock)."""
        return int((self.clock() - self.epoch).total_seconds())

    def start(self, timeout_s: float = 60.0, stop: threading.Event | None = None) -> None:
        # Kinds whose CRD is not installed (coscheduling's PodGroups, say) are not read.
        self.served = {n for n, w in self.owner_watch if not w.crd or self._served(n, w)}
        self._discover_at = time.monotonic() + self.cfg.discover_s
        looked = self._seconds()
        self.unread = {n: looked for n, _ in self.owner_watch if n not in self.served}
        for inf in self._informers():
            inf.start()
        deadline = time.monotonic() + timeout_s
        for inf in self._informers():
            # in short waits: a stop (SIGTERM) while a list is refused ends the wait
            while not inf.wait_synced(0.2):
                if stop is not None and stop.is_set():
                    return
                if time.monotonic() > deadline:
                    raise ApiError("LIST", inf.path, 0, f"no list within {timeout_s:.0f} s")

    def stop(self) -> None:
        for inf in self._informers():
            inf.stop()
        self.binder.shutdown()
        self.reporter.shutdown()

    def run(self, stop: threading.Event, elector: LeaderElector | None = None) -> None:
        """Cycle until `stop` is set or the lease is lost."""
        self.start(stop=stop)
        if stop.is_set():
            return
        self.publish_mig_configs()
        self.usage = usage_as_kept(self.client, self.policy, self.epoch)
        if self.health is not None:
            self.health.synced = True
        self.metrics.leader.set(1)  # leading (or alone): the loop runs from here
        self.collector.begin()
        try:
            self._loop(stop, elector)
        finally:
            self.collector.end()
            self.metrics.leader.set(0)

    def _loop(self, stop: threading.Event, elector: LeaderElector | None) -> None:
        while not stop.is_set():
            if self.health is not None:
                self.health.beat()
            quiet = not self._wake.wait(self.cfg.interval_s)
            self._wake.clear()
            with self._asking:
                asked, self._asked = self._asked, False
            if not quiet and not asked and self._only_confirmed():
                self.skipped += 1
                continue
            if stop.wait(self._rest_s()):
                break
            if elector is not None and not elector.is_leader():
                log.error("not the leader any more: stopping")
                break
            self._reload()
            began = time.monotonic()
            try:
                self.discover()
                self.cycle()
            except ApiError as err:
                log.warning("cycle failed: %s; retrying", err)
                with self._asking:  # at the next wake, even one that only confirms bindings
                    self._asked = True
            ended = time.monotonic()
            self._last_cycles = (ended, (self._last_cycles[1][1], ended - began))
            # In the rest, which counts from `ended`: the cycle's bindings land first, with
            # no cycle or collection holding their threads back (a gang's pods would show
            # bound in part meanwhile), then what the cycle left is collected.
            # (only the cycle binds, so what is still in flight after the wait stays so)
            idle = self.binder.wait_idle(BINDINGS_WAIT_S)
            self.collector.after_cycle(quiet, binding=not idle)

    def _reload(self) -> None:
        """A new policy from the reloader, if it has one (counted, as a refused one is)."""
        if self.reloader is None:
            return
        refused = self.reloader.refused
        if (new := self.reloader.poll()) is not None:
            self.metrics.reloads.labels("applied").inc()
            self.set_policy(new)
        elif self.reloader.refused > refused:
            self.metrics.reloads.labels("refused").inc()

    def discover(self) -> list[str]:
        """Owner kinds whose CRD was installed since the scheduler started (coscheduling's
        PodGroups, say): their informers start and their objects count from this cycle. At
        most one look every `discover_s` seconds, or every `AWAITED_DISCOVER_S` while pods
        wait for the objects of a kind not served (their gang waits whole meanwhile); the
        kinds found are returned (and logged)."""
        missing = [(n, w) for n, w in self.owner_watch if n not in self.served]
        now = time.monotonic()
        if not missing or now < self._discover_at:
            return []
        self._discover_at = now + (
            AWAITED_DISCOVER_S
            if self.kinds_awaited & {n for n, _ in missing}
            else self.cfg.discover_s
        )
        found = []
        looked = self._seconds()
        for name, w in missing:
            if not self._served(name, w, quiet=True):
                self.unread[name] = looked
                continue
            inf = self.owners[name]
            inf.start()
            if not inf.wait_synced(30.0):
                inf.stop()
                self.owners[name] = Informer(self.client, w.path, self._poke)
                continue
            self.served.add(name)
            self.unread.pop(name, None)
            found.append(name)
            log.info("the %s CRD is installed now: its objects are read from this cycle", name)
        return found

    def set_policy(self, policy: Policy) -> None:
        """Schedule by `policy` from the next cycle on. Everything derived from the old one
        goes (engine state, validated workloads, the inventory, MIG hand-off settings); what
        runs stays bound: pods of a queue or pool the new policy lacks keep their GPUs and are
        reported (`orphans`)."""
        log.info(
            "policy %s loaded: %d pools, %d queues", policy.name, len(policy.pools),
            len(policy.queues),
        )  # fmt: skip
        if not self.dra and any(p.devices is DeviceApi.DRA for p in policy.pools):
            # the DRA informers start with the scheduler: until a restart the new pools'
            # nodes are reported as publishing no device, and their claims wait
            log.warning(
                "policy %s adds DRA pools: restart the scheduler to read ResourceSlices and "
                "ResourceClaims", policy.name,
            )  # fmt: skip
        self.policy = policy
        self.engine = Engine(rebuilt_views=True)
        self.fed = None
        if self.index.governed != (governed := policy.governed_namespaces()):
            self.index = PodIndex(self.cfg.name, self.facts, governed)
        self.workloads = WorkloadCache()
        self._inventory = None
        self.mig = MigHandoff(self.client, policy, self.cfg.mig, self.clock, self._repartitioned)
        self.publish_mig_configs()
        self.dynamic_mig = any(p.mig_dynamic is not None for p in policy.pools)
        self.reporter.reset()

    def publish_mig_configs(self) -> None:
        """The static MIG configurations of the policy, for the GPU Operator (once per
        policy; without the right to, the pools' nodes need `gpucarve render mig-config`)."""
        try:
            self.mig.publish_static()
        except ApiError as err:
            cm = f"{self.cfg.mig.namespace}/{self.cfg.mig.config_map}"
            log.warning("static MIG configurations not written to %s: %s", cm, err)

    # ------------------------------------------------------------------ one cycle
    def inventory(self) -> Inventory:
        """Rebuilt when what it depends on changed (`node_key`), not looked at while the node
        cache is unchanged: at 5,000 nodes the keys alone cost a tenth of a cycle."""
        # The generations first (an int each, read whole): a cycle asks several times, and
        # a copy of the caches' lists each time holds their informers' locks for nothing.
        if self._inventory is not None and self._inventory_seen == (
            self.nodes.generation,
            self.slices.generation if self.dra else 0,
        ):
            return self._inventory[1]
        nodes_seen, nodes = self.nodes.snapshot()
        slices_seen, slices = self.slices.snapshot() if self.dra else (0, [])
        generation = (nodes_seen, slices_seen)
        key = (*sorted(self._node_key(n) for n in nodes), f"slices@{slices_seen}")
        if self._inventory is None or self._inventory[0] != key:
            labelled = label_nodes(self.client, self.policy, nodes)
            dra = read_slices(slices) if self.dra else None
            inv = build_inventory(self.policy, labelled, dra)
            self._dra_devices = inv.dra
            self._inventory = (key, inv)
            for p in inv.problems:
                if str(p) not in self.node_problems:
                    log.warning("%s", p)
            self.node_problems = {str(p) for p in inv.problems}
        self._inventory_seen = generation
        if len(self._node_keys) > 2 * len(nodes) + 64:
            self._node_keys.clear()
        return self._inventory[1]

    def _node_key(self, node: dict[str, Any]) -> str:
        meta = node["metadata"]
        if not meta.get("resourceVersion"):
            return node_key(node)  # no version to know it by
        version = (meta["name"], meta["resourceVersion"])
        got = self._node_keys.get(version)
        if got is None:
            got = self._node_keys[version] = node_key(node)
        return got

    def _phase_of(self, pod_key: str) -> str | None:
        pod = self.pods.get(pod_key)
        return None if pod is None else (pod.get("status") or {}).get("phase")

    def view(self) -> View:
        with self.binder.lock:
            for pod_key in list(self.assumed):
                pod = self.pods.get(pod_key)
                if pod is None or (pod.get("spec") or {}).get("nodeName"):
                    del self.assumed[pod_key]
            assumed = dict(self.assumed)
        generation, changes, every = self.pods.changes_since(self.index.generation)
        if changes is None:
            self.index.sync_all(every, assumed, self.bound.assumed_pod, generation)
        else:
            self.index.sync(changes, assumed, self.bound.assumed_pod, generation)
        specs = all_specs({name: self.owners[name].items() for name in self.served})
        return build_view(
            self.policy,
            self.inventory(),
            (),
            self.cfg.name,
            self.epoch,
            specs,
            assumed,
            self.workloads,
            self.facts,
            self.bound,
            now=self._seconds(),
            claims=self.claims.items() if self.dra else (),
            index=self.index,
            unread=self.unread,
        )

    def cycle(self) -> CycleReport:
        """Observe, decide, then each reaction in turn (`reactions.REACTIONS`)."""
        seen = self.observe()
        decided = self.decide(seen)
        for reaction in self.reactions:
            reaction.react(self, decided)
        return decided.report

    def observe(self) -> Observed:
        """The view of the cluster and the snapshot the engine is given: pending workloads
        that wait outside the cycle (for victims, in a binding's back-off) taken out, the
        slices held for them in, learned runtimes and the step from the last snapshot added.
        What the view shows that needs an answer before any decision (failed GPUs, pods bound
        elsewhere, orphans, warnings) is answered here."""
        self._others_seen = self._others()
        if self.dynamic_mig:
            inv = self.inventory()
            self.mig.advance(self._nodes_by_name(), inv.layouts, inv.changes)
        view = self.view()
        if view.awaiting - self.served and not self.kinds_awaited:
            # pods wait for a kind's objects its CRD is not read for: look for it soon
            self._discover_at = min(self._discover_at, time.monotonic() + AWAITED_DISCOVER_S)
        self.kinds_awaited = view.awaiting
        if self.device_configs.written:
            self.device_configs.forget_gone({pod_id(p) for p in self.pods.items()})
        self._warn(view)
        self.reporter.orphans(view)
        self.elsewhere.handle(view, self.policy.scheduling.bound_elsewhere)
        self.reporter.device_moves(view)
        inv = self.inventory()
        changes = self.gpu_service.handle(
            self.nodes.items, self.nodes.get, inv.out_of_service, inv.held_in_service
        )
        self.metrics.observe_gpu_changes(view.snapshot, changes.reset, changes.returned)
        if self.dra:
            self.device_taints.handle(inv.out_of_service, inv.dra)
        evicted = self.failed_gpus.handle(view.snapshot, inv.out_of_service, self.policy.gpu_health)
        self.metrics.observe_health(view.snapshot, inv.out_of_service, evicted, inv.held_in_service)
        now = int((self.clock() - self.epoch).total_seconds())
        waiting = self._still_awaiting(view, now)
        backing = self._backing_off(view)
        snapshot, layers = self._outside_the_cycle(view, waiting, backing)
        observed, self._observed = self._observed, view.layers
        hint = None if view.layers is None else maybe_gone(observed, view.layers)
        self.runtimes.observe(view.snapshot, view.running_pods, self._phase_of, now, hint)
        snapshot = dataclasses.replace(snapshot, runtimes=self.runtimes.book, usage=self.usage)
        snapshot = self.short_gangs.dated(view, snapshot, now)
        if self.idle_watch is not None:
            mine = under_rules(self.policy, snapshot)
            pods = {wid: view.running_pods.get(wid, ()) for wid in mine}
            marked = marked_idle(pods, self.pods.get, self.epoch)
            idle = self.idle_watch.idle_since(self.policy, snapshot, now, marked)
            snapshot = dataclasses.replace(snapshot, idle_since=idle)
        snapshot = self._stepped(snapshot, layers)
        return Observed(view, snapshot, now, backing)

    def decide(self, seen: Observed) -> Decided:
        """The engine's cycle on the observed snapshot (its rules checked in debug mode)."""
        snapshot = seen.snapshot
        started = time.perf_counter()  # a duration for the metrics, never read by a decision
        result = self.engine.run_cycle(snapshot, seen.now)
        took = time.perf_counter() - started
        if result.usage is not None:
            self.usage = result.usage
        self.cycles += 1
        if self.cfg.check_invariants:
            check_step(snapshot, result, apply_cycle(snapshot, result))
        return Decided(seen.view, snapshot, result, seen.backing, took, CycleReport(seen.now))

    def _warn(self, view: View) -> None:
        for w in view.warnings:
            if w not in self._warned:  # once while it lasts, not every cycle
                log.warning("%s", w)
        self._warned = set(view.warnings)

    def _outside_the_cycle(
        self, view: View, waiting: Mapping[str, frozenset[str]], backing: Mapping[str, str]
    ) -> tuple[Snapshot, Layers | None]:
        """The view's snapshot without the workloads in a binding's back-off or waiting for
        their victims, and with the slices held for the latter."""
        snapshot, layers = view.snapshot, view.layers
        if backing:
            kept = tuple(w for w in snapshot.pending if w.id not in backing)
            snapshot = dataclasses.replace(snapshot, pending=kept)
        if waiting:
            kept = tuple(w for w in snapshot.pending if w.id not in waiting)
            snapshot = dataclasses.replace(snapshot, pending=kept)
            held = awaited_holds(snapshot, self.holding)
            snapshot = with_held(snapshot, held)
            layers = None if layers is None else layers.with_held(held)
        return snapshot, layers

    def waiting(self, backing: Mapping[str, str]) -> dict[str, frozenset[str]]:
        """Workloads that wait outside the cycle (for victims, after a refused eviction, or
        in a binding's back-off), by the pods they wait for."""
        return {**self._waiting(), **{w: frozenset() for w in backing}}

    def _stepped(self, snapshot: Snapshot, layers: Layers | None) -> Snapshot:
        """The snapshot with the step from the one the engine was given last, when the views'
        layers tell it (`view_step`), so that the engine follows it in proportion to what
        changed; the engine compares the two snapshots whole otherwise. Checking invariants,
        the state the engine reaches must be a fresh one's."""
        fed, self.fed = self.fed, None
        step = None if fed is None or layers is None else step_between(fed[1], layers)
        if step is not None and fed is not None:
            snapshot = dataclasses.replace(snapshot, delta=fed[0].delta_with(step))
            self.stepped += 1
            if self.cfg.check_invariants:
                self.engine.follow(snapshot)
                if differs := self.engine.differs_from_fresh():
                    raise InvariantViolation(f"the view's step left the engine off: {differs}")
        if layers is not None:
            self.fed = (snapshot, layers)
        return snapshot

    def _repartitioned(self, node: str, result: str) -> None:
        pool = next((n.pool for n in self.inventory().cluster.nodes if n.name == node), "none")
        self.metrics.repartitions.labels(pool, result).inc()

    def _nodes_by_name(self) -> dict[str, dict[str, Any]]:
        return {n["metadata"]["name"]: n for n in self.nodes.items()}

    def _backing_off(self, view: View) -> dict[str, str]:
        """Pending workloads a pod of which is in its binding's back-off, with why: they are
        not placed again until it passes."""
        if not self.binder.backoff:
            return {}
        held = self.binder.held_back({pod_id(p) for p in self.pods.items()})
        out = {}
        for w, sets in view.pending_sets.items():
            said = [held[p] for pods in sets for p in pods if p in held]
            if said:
                out[w] = said[0]
        return out  # (the loop cycles every interval_s while pods wait: it passes in time)

    def _waiting(self) -> dict[str, frozenset[str]]:
        if not self.refused:
            return self.awaiting
        refused = {w: frozenset(r.pods) for w, r in self.refused.items()}
        return {**self.awaiting, **refused}

    def _still_awaiting(self, view: View, now: int) -> dict[str, frozenset[str]]:
        """The admissions still waiting for victims (one whose victims are gone waits no
        more), and those whose victims' eviction was refused, until they are asked again."""
        if not self.awaiting and not self.refused:
            return self.awaiting  # the common case: no pass over every running pod
        present = {pod for pods in view.running_pods.values() for pod in pods}
        # one deleted meanwhile holds nothing any more
        wanted = {w.id for w in view.snapshot.pending} | view.running_pods.keys()
        self.awaiting = {
            w: still
            for w, victims in self.awaiting.items()
            if w in wanted and (still := victims & present)
        }
        self.holding = {w: s for w, s in self.holding.items() if w in self.awaiting}
        self.refused = {
            w: r
            for w, r in self.refused.items()
            if w in wanted and now < r.until and r.pods.keys() & present
        }
        return self._waiting()


def confirms(
    changes: Mapping[str, Mapping[str, Any] | None] | None, assumed: Mapping[str, Assigned]
) -> bool:
    """Whether every pod change (the informer's, by pod key; None: deleted) shows an assumed
    pod bound as it was assumed: its node, slices and the memory promised on a shared GPU. No
    change, or none known (the informer's log does not reach back), is no confirmation."""
    if not changes:
        return False
    for pod_key, pod in changes.items():
        a = assumed.get(pod_key)
        seen = None if pod is None or a is None else assigned_of(pod)
        if seen is None or a is None:
            return False
        if (seen.node, seen.slices, seen.shared_memory_mib) != (
            a.node, a.slices, a.shared_memory_mib,
        ):  # fmt: skip
            return False
    return True
