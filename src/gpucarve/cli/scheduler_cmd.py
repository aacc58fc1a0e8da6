"""`gpucarve scheduler`: schedule pods with `schedulerName: gpucarve` on a real cluster."""

from __future__ import annotations

import gc
import logging
import os
import signal
import socket
import threading
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from gpucarve.cli.common import CatalogOption, policy_or_exit
from gpucarve.cli.kube_options import ContextOption, KubeconfigOption, client_or_exit
from gpucarve.cli.output import Exit, console
from gpucarve.core.problems import InvalidInput, errors
from gpucarve.kube.api.client import ApiError, Client
from gpucarve.kube.api.events import post_event
from gpucarve.kube.api.leader import LeaderElector
from gpucarve.kube.scheduler.health import Health, ProbeServer
from gpucarve.kube.scheduler.loop import Scheduler, SchedulerConfig
from gpucarve.kube.scheduler.mig_handoff import HandoffConfig
from gpucarve.kube.scheduler.policy_reload import PolicyReloader, digest
from gpucarve.metrics.scheduler_metrics import SchedulerMetrics

GC_THRESHOLDS = (50_000, 50, 100)  # generation 0 allocations, then collections of 0 and 1

log = logging.getLogger("gpucarve.scheduler")


def _policy_refused(client: Client, config_map: str | None, exc: InvalidInput) -> None:
    """A changed policy that does not validate: logged, and an Event on its ConfigMap."""
    lines = [f"{p.location}: {p.message} (fix: {p.fix})" for p in errors(exc.problems)]
    message = f"policy {exc.source} refused, the previous one stays: " + "; ".join(lines)
    log.error("%s", message)
    if config_map and "/" in config_map:
        ns, _, name = config_map.partition("/")
        involved = {"apiVersion": "v1", "kind": "ConfigMap", "name": name, "namespace": ns}
        post_event(client, involved, "Warning", "PolicyInvalid", message, datetime.now(UTC))


def scheduler(
    policy: Annotated[Path, typer.Option("--policy", help="The policy YAML to schedule by.")],
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    name: Annotated[
        str, typer.Option("--name", help="The schedulerName of the pods to schedule.")
    ] = "gpucarve",
    leader_elect: Annotated[
        bool,
        typer.Option(
            "--leader-elect/--no-leader-elect",
            help="Take a Lease first, so only one replica schedules.",
        ),
    ] = True,
    lease_namespace: Annotated[
        str, typer.Option("--lease-namespace", help="Namespace of the Lease.")
    ] = "kube-system",
    lease_duration: Annotated[
        int, typer.Option("--lease-duration", min=2, help="Seconds a lease lasts unrenewed.")
    ] = 15,
    identity: Annotated[
        str | None,
        typer.Option("--identity", help="This replica's name in the Lease (default host_pid)."),
    ] = None,
    mig_config_map: Annotated[
        str,
        typer.Option(
            "--mig-config-map",
            help="NAMESPACE/NAME of the mig-parted ConfigMap the GPU Operator's MIG manager "
            "reads (ClusterPolicy spec.migManager.config.name); dynamic MIG adds its "
            "configurations there.",
        ),
    ] = "gpu-operator/gpucarve-mig-parted-config",
    mig_propagation: Annotated[
        float,
        typer.Option(
            "--mig-propagation",
            min=0,
            help="Seconds between writing a MIG configuration and switching a node's "
            "nvidia.com/mig.config label (the kubelet refreshes mounted ConfigMaps late).",
        ),
    ] = 60.0,
    mig_timeout: Annotated[
        float,
        typer.Option("--mig-timeout", min=1, help="Seconds a MIG change may take."),
    ] = 900.0,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log every cycle.")] = False,
    health_port: Annotated[
        int,
        typer.Option(
            "--health-port",
            min=0,
            max=65535,
            help="Serve /healthz, /readyz and /metrics on this port (0: not at all).",
        ),
    ] = 0,
    health_host: Annotated[
        str, typer.Option("--health-host", help="Address the probes listen on.")
    ] = "0.0.0.0",
    reload_policy: Annotated[
        bool,
        typer.Option(
            "--reload-policy/--no-reload-policy",
            help="Follow the policy file: a new valid policy is used from the next cycle, an "
            "invalid one is reported and the old one kept.",
        ),
    ] = True,
    policy_config_map: Annotated[
        str | None,
        typer.Option(
            "--policy-config-map",
            help="NAMESPACE/NAME of the ConfigMap the policy file is mounted from: invalid "
            "policies are reported as Warning Events on it.",
        ),
    ] = None,
    check_invariants: Annotated[
        bool,
        typer.Option(
            "--check-invariants",
            help="Debug mode: check every rule on each cycle's decisions before acting; stop "
            "at the first broken one instead of binding.",
        ),
    ] = False,
    catalog: CatalogOption = None,
) -> None:
    """Run the gpucarve scheduler: bind pending pods by the policy's quotas, gangs and
    placement, say why the others wait, and preempt through the Eviction API. Stops on
    SIGTERM or Ctrl-C (giving the Lease up)."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    read_as = digest(policy)  # before the read: a change in between is picked up later
    loaded = policy_or_exit(policy, catalog)
    err = console(stderr=True)
    for i, pool in enumerate(loaded.policy.pools):
        if pool.mig_dynamic is not None and pool.mig_dynamic.keep_in_use:
            err.print(
                Text(
                    f"{policy}: pools[{i}].mig.dynamic.granularity: pool {pool.name} asks for "
                    "`instance`, which keeps instances in use while their GPU changes; the GPU "
                    "Operator's MIG manager recreates every instance of a GPU it changes",
                    style="red",
                )
            )
            err.print(Text("fix: use `granularity: gpu` (the default) on Kubernetes"))
            raise typer.Exit(Exit.INVALID)
    namespace, _, cm_name = mig_config_map.partition("/")
    if not namespace or not cm_name:
        err.print(Text(f"--mig-config-map {mig_config_map!r} is not NAMESPACE/NAME", style="red"))
        err.print(Text("fix: e.g. --mig-config-map gpu-operator/gpucarve-mig-parted-config"))
        raise typer.Exit(Exit.INVALID)
    client = client_or_exit(kubeconfig, context)
    try:
        client.get("/version")
    except ApiError as exc:
        err.print(Text(str(exc), style="red"))
        err.print(Text("fix: pass --kubeconfig for a cluster that is up (its current context)"))
        raise typer.Exit(Exit.INVALID) from None
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    health = Health(leader=None if not leader_elect else False)
    health.beat()
    metrics = SchedulerMetrics(pools_every_s=2.0)
    probes = None
    if health_port:
        probes = ProbeServer(health, health_host, health_port, metrics.registry)
        try:
            probes.start()
        except OSError as exc:
            err.print(Text(f"--health-port {health_port}: {exc}", style="red"))
            err.print(Text("fix: pick a free port"))
            raise typer.Exit(Exit.INVALID) from None
    elector = None
    if leader_elect:
        who = identity or f"{socket.gethostname()}_{os.getpid()}"
        elector = LeaderElector(
            client,
            lease_namespace,
            f"{name}-scheduler",
            who,
            duration_s=lease_duration,
            renew_s=max(1.0, lease_duration / 5),
        )
        log.info("%s waiting for the lease %s/%s-scheduler", who, lease_namespace, name)
        if not elector.acquire(stop, on_try=health.beat):
            return
        health.leader = True
        elector.keep_renewing(stop)
    mig = HandoffConfig(namespace, cm_name, mig_propagation, mig_timeout)
    cfg = SchedulerConfig(name=name, mig=mig, check_invariants=check_invariants)
    reloader = None
    if reload_policy:
        reloader = PolicyReloader(
            policy,
            catalog or [],
            partial(_policy_refused, client, policy_config_map),
            loaded=read_as,
        )
    sched = Scheduler(client, loaded.policy, cfg, health=health, reloader=reloader, metrics=metrics)
    # The informers hold every pod and node as long-lived dicts (hundreds of thousands of
    # objects at 10,000 pods); with CPython's default thresholds a full collection walks them
    # every few cycles and doubled a 0.1 s view now and then. JSON objects hold no reference
    # cycles, so rarer collections cost little memory.
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        sched.run(stop, elector)
    except ApiError as err:
        log.error("%s", err)
        raise typer.Exit(1) from None
    finally:
        sched.stop()
        if probes is not None:
            probes.stop()
        if elector is not None and stop.is_set():
            elector.release()
    if elector is not None and not stop.is_set():
        raise typer.Exit(1)  # lost the lease: exit so the supervisor restarts us as standby
