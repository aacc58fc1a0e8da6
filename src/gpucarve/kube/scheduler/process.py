"""The scheduler as a process: signals, the health and metrics endpoints, the Lease, the
dashboard's server, the collector's thresholds, the policy reloader, then the loop until a
signal or a lost Lease (then the history recorder's last lines written). `gpucarve scheduler`
reads its options into `ProcessSettings` and calls `run_process`, as kube-scheduler's and
Kueue's commands hand their options to a setup package; the dashboard (a room above this
one) is handed in, built by the command."""

from __future__ import annotations

import gc
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

from gpucarve.core.policy import Policy
from gpucarve.core.problems import InvalidInput, errors
from gpucarve.kube.api.client import ApiError, Client
from gpucarve.kube.api.events import post_event
from gpucarve.kube.api.leader import LeaderElector
from gpucarve.kube.scheduler.health import (
    Health,
    HistoryGuard,
    ProbeServer,
    ThreadServer,
    everyone,
)
from gpucarve.kube.scheduler.held_idle import ActivityFeed, IdleWatch
from gpucarve.kube.scheduler.leader_label import mark
from gpucarve.kube.scheduler.loop import Scheduler, SchedulerConfig
from gpucarve.kube.scheduler.observed import Observer
from gpucarve.kube.scheduler.policy_reload import PolicyReloader
from gpucarve.kube.scheduler.reactions import REACTIONS, Reaction
from gpucarve.kube.scheduler.recorder import Recorder
from gpucarve.kube.scheduler.shadow import ReadOnlyClient, WouldStart, shadow_reactions
from gpucarve.metrics.scheduler_metrics import SchedulerMetrics
from gpucarve.sim.history.store import Bounds, HistoryStore

GC_THRESHOLDS = (50_000, 50, 100)  # generation 0 allocations, then collections of 0 and 1

log = logging.getLogger("gpucarve.scheduler")


class PortTaken(Exception):
    """A server of the process could not listen: the flag that names its port, and why."""

    def __init__(self, flag: str, port: int, cause: OSError) -> None:
        super().__init__(f"{flag} {port}: {cause}")
        self.flag = flag


@dataclass(frozen=True)
class ProcessSettings:
    """The process's options (the command's flags), the policy already read."""

    policy_path: Path
    policy_digest: str | None  # of the file as read: a change since is reloaded
    catalog: list[Path] = field(default_factory=list)
    config: SchedulerConfig = field(default_factory=SchedulerConfig)
    leader_elect: bool = True
    lease_namespace: str = "kube-system"
    lease_duration_s: int = 15
    identity: str | None = None
    health_host: str = "0.0.0.0"
    health_port: int = 0  # 0: no health and metrics endpoint
    leader_pod: str | None = None  # NAMESPACE/NAME of this replica's pod, labelled when it leads
    reload_policy: bool = False
    policy_config_map: str | None = None  # NAMESPACE/NAME: where a refused policy's Event goes
    history_dir: Path | None = None  # where the history recorder keeps its files (None: none)
    history_bounds: Bounds = field(default_factory=Bounds)
    # who may read /history, and which namespaces' workloads (default: everyone, everything)
    history_guard: HistoryGuard = everyone
    # a shadow's book of what it would have started (one of its own when None and `shadow`;
    # given, so the dashboard can show it)
    would: WouldStart | None = None
    # beside the cluster's real scheduler: decide, write nothing, record (`shadow.py`)
    shadow: bool = False
    # GPU activity for the queues' idleness rules (--gpu-metrics-url; None: none read)
    gpu_activity: ActivityFeed | None = None


@dataclass
class Dashboard:
    """The dashboard as the process runs it: told each cycle, served by its own thread."""

    observe: Observer
    server: ThreadServer


def policy_refused(client: Client, config_map: str | None, exc: InvalidInput) -> None:
    """A changed policy that does not validate: logged, and an Event on its ConfigMap."""
    lines = [f"{p.location}: {p.message} (fix: {p.fix})" for p in errors(exc.problems)]
    message = f"policy {exc.source} refused, the previous one stays: " + "; ".join(lines)
    log.error("%s", message)
    if config_map and "/" in config_map:
        ns, _, name = config_map.partition("/")
        involved = {"apiVersion": "v1", "kind": "ConfigMap", "name": name, "namespace": ns}
        post_event(client, involved, "Warning", "PolicyInvalid", message, datetime.now(UTC))


def _lead(
    client: Client,
    elector: LeaderElector | None,
    health: Health,
    stop: threading.Event,
    leader_pod: str | None,
) -> bool:
    """Wait for the Lease (without leader election, lead at once); False: stopped first.
    The pod's leader label says which, for the dashboard's Service."""
    if leader_pod:
        mark(client, leader_pod, leading=elector is None)
    if elector is None:
        return True
    log.info("%s waiting for the lease %s/%s", elector.identity, elector.path, elector.name)
    if not elector.acquire(stop, on_try=health.beat):
        return False
    health.leader = True
    elector.keep_renewing(stop)
    if leader_pod:
        mark(client, leader_pod, leading=True)
    return True


def _elector(client: Client, s: ProcessSettings) -> LeaderElector | None:
    if not s.leader_elect:
        return None
    who = s.identity or f"{socket.gethostname()}_{os.getpid()}"
    return LeaderElector(
        client,
        s.lease_namespace,
        f"{s.config.name}-scheduler",
        who,
        duration_s=s.lease_duration_s,
        renew_s=max(1.0, s.lease_duration_s / 5),
    )


def _feed(recorder: Recorder, since: int | None, namespaces: frozenset[str] | None) -> str:
    return recorder.feed(since, int(time.time()), namespaces)


def _reactions(s: ProcessSettings) -> tuple[Sequence[Reaction], Recorder | None]:
    """What the loop does with its cycles, and the history recorder among them (if any)."""
    would = s.would if s.would is not None else (WouldStart() if s.shadow else None)
    recorder = None
    if s.history_dir is not None:
        store = HistoryStore(s.history_dir, s.history_bounds)
        recorder = Recorder(store, would_start=None if would is None else would.of)
    acts: tuple[Reaction, ...] = (
        tuple(REACTIONS) if would is None else tuple(shadow_reactions(would))
    )
    return (acts if recorder is None else (*acts, recorder)), recorder


def _probes(
    s: ProcessSettings, health: Health, metrics: SchedulerMetrics, recorder: Recorder | None
) -> ProbeServer | None:
    if not s.health_port:
        return None
    feed = None
    if recorder is not None:
        feed = partial(_feed, recorder)
    probes = ProbeServer(
        health, s.health_host, s.health_port, metrics.registry, feed, s.history_guard
    )
    try:
        probes.start()
    except OSError as exc:
        raise PortTaken("--health-port", s.health_port, exc) from None
    return probes


def run_process(
    client: Client,
    policy: Policy,
    s: ProcessSettings,
    dashboard: Callable[[], Dashboard | None] = lambda: None,
) -> int:
    """Run the scheduler until SIGTERM or Ctrl-C (the Lease given up) or a lost Lease; the
    exit code: 0 when stopped, 1 when the Lease was lost (the supervisor restarts the replica
    as a standby) or the API server refused the scheduler. A port that cannot be listened on
    raises `PortTaken` before anything is led."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    health = Health(leader=None if not s.leader_elect else False)
    health.beat()
    metrics = SchedulerMetrics()
    if s.shadow:
        client = ReadOnlyClient.of(client)  # a write is never sent, whoever asks for one
    reactions, recorder = _reactions(s)
    probes = _probes(s, health, metrics, recorder)
    elector = _elector(client, s)
    # served from the start (a standby answers that it has no cycle to show; a taken port
    # fails now, not once the replica leads); the scheduler tells it its cycles once it leads
    try:
        board = dashboard()
    except PortTaken:
        if probes is not None:
            probes.stop()
        raise
    try:
        return _lead_and_run(client, policy, s, stop, health, metrics, elector, board, reactions)
    finally:
        if recorder is not None:
            recorder.flush(int(time.time()))
        if probes is not None:
            probes.stop()
        if board is not None:
            board.server.stop()


def _lead_and_run(
    client: Client,
    policy: Policy,
    s: ProcessSettings,
    stop: threading.Event,
    health: Health,
    metrics: SchedulerMetrics,
    elector: LeaderElector | None,
    board: Dashboard | None,
    reactions: Sequence[Reaction] = REACTIONS,
) -> int:
    if not _lead(client, elector, health, stop, s.leader_pod):
        return 0
    reloader = None
    if s.reload_policy:
        reloader = PolicyReloader(
            s.policy_path,
            s.catalog,
            partial(policy_refused, client, s.policy_config_map),
            loaded=s.policy_digest,
        )
    sched = Scheduler(
        client, policy, s.config, health=health, reloader=reloader, metrics=metrics,
        reactions=reactions,
    )  # fmt: skip
    if board is not None:
        sched.observers.append(board.observe)
    if s.gpu_activity is not None:
        sched.idle_watch = IdleWatch(s.gpu_activity)
        s.gpu_activity.start()
    # The informers hold every pod and node as long-lived dicts (hundreds of thousands of
    # objects at 10,000 pods); with CPython's default thresholds a full collection walks them
    # every few cycles and doubled a 0.1 s view now and then. JSON objects hold no reference
    # cycles, so rarer collections cost little memory. These hold while the caches fill; the
    # loop then collects between its cycles itself (`kube/scheduler/collector.py`).
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        sched.run(stop, elector)
    except ApiError as err:
        log.error("%s", err)
        return 1
    finally:
        sched.stop()
        if s.gpu_activity is not None:
            s.gpu_activity.stop()
        if elector is not None and stop.is_set():
            elector.release()
        if s.leader_pod:
            mark(client, s.leader_pod, leading=False)
    if elector is not None and not stop.is_set():
        return 1  # lost the lease: exit so the supervisor restarts us as standby
    return 0
