"""`gpucarve scheduler`: schedule pods with `schedulerName: gpucarve` on a real cluster."""

from __future__ import annotations

import logging
from enum import StrEnum
from functools import partial
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text

from gpucarve.cli.common import CatalogOption, policy_or_exit
from gpucarve.cli.kube_options import ContextOption, KubeconfigOption, client_or_exit
from gpucarve.cli.output import Exit, console, refuse
from gpucarve.core.policy import DeviceApi, Policy
from gpucarve.dashboard.access import Denied, KubeAccess, Open
from gpucarve.dashboard.gpu_use import PrometheusGpuUse
from gpucarve.dashboard.server import Board, Shadow
from gpucarve.dashboard.server import app as dashboard_app
from gpucarve.kube.api.client import ApiError, Client
from gpucarve.kube.scheduler.health import HistoryDenied, HistoryGuard, ThreadServer, everyone
from gpucarve.kube.scheduler.held_idle import ActivityFeed
from gpucarve.kube.scheduler.loop import SchedulerConfig
from gpucarve.kube.scheduler.mig_handoff import HandoffConfig
from gpucarve.kube.scheduler.policy_reload import digest
from gpucarve.kube.scheduler.process import Dashboard, PortTaken, ProcessSettings, run_process
from gpucarve.kube.scheduler.shadow import WouldStart
from gpucarve.sim.history.store import history_bounds

log = logging.getLogger("gpucarve.scheduler")


class DashboardAuth(StrEnum):
    KUBE = "kube"
    NONE = "none"


def scheduler(
    policy: Annotated[Path, typer.Option("--policy", help="The policy YAML to schedule by.")],
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    name: Annotated[
        str | None,
        typer.Option(
            "--name",
            help="The schedulerName of the pods to schedule (default: gpucarve; with --shadow, "
            "default-scheduler).",
        ),
    ] = None,
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
    dashboard_port: Annotated[
        int,
        typer.Option(
            "--dashboard-port",
            min=0,
            max=65535,
            help="Serve the web dashboard on this port (0: not at all).",
        ),
    ] = 0,
    dashboard_host: Annotated[
        str, typer.Option("--dashboard-host", help="Address the dashboard listens on.")
    ] = "0.0.0.0",
    leader_pod: Annotated[
        str | None,
        typer.Option(
            "--leader-pod",
            help="NAMESPACE/NAME of this replica's pod: labelled gpucarve.io/leader=true while "
            "it leads, so the dashboard's Service reaches the leader.",
        ),
    ] = None,
    dashboard_auth: Annotated[
        DashboardAuth,
        typer.Option(
            "--dashboard-auth",
            help="kube: each request's bearer token is reviewed by the API server (TokenReview "
            "and SubjectAccessReview); none: everyone sees everything (only behind kubectl "
            "port-forward).",
        ),
    ] = DashboardAuth.KUBE,
    gpu_metrics_url: Annotated[
        str | None,
        typer.Option(
            "--gpu-metrics-url",
            help="A Prometheus that scrapes the DCGM exporter (e.g. "
            "http://prometheus.monitoring:9090): the dashboard shows each GPU's utilisation and "
            "memory, and each team's, beside what the scheduler allocated; the queues' idleness "
            "rules judge running work idle by it (without it, no work is ever judged idle).",
        ),
    ] = None,
    history_dir: Annotated[
        Path | None,
        typer.Option(
            "--history-dir",
            help="Record every GPU workload's history (arrival, starts, evictions, end, nodes) "
            "here as a trace `gpucarve history replay` reads, served on /history of "
            "--health-port (default: none kept).",
        ),
    ] = None,
    history_max_mib: Annotated[
        int,
        typer.Option(
            "--history-max-mib", min=1, max=1_000_000, help="The most the history keeps on disk."
        ),
    ] = 256,
    history_max_days: Annotated[
        int,
        typer.Option(
            "--history-max-days", min=1, max=3650, help="Workloads older are dropped, by file."
        ),
    ] = 90,
    history_auth: Annotated[
        DashboardAuth,
        typer.Option(
            "--history-auth",
            help="Who may read /history: kube (the default): a request's bearer token is "
            "reviewed by the API server, and a user who may list nodes reads every workload, "
            "one who may list pods in some of the policy's namespaces only theirs; none: "
            "everyone reads everything (only behind kubectl port-forward).",
        ),
    ] = DashboardAuth.KUBE,
    shadow: Annotated[
        bool,
        typer.Option(
            "--shadow",
            help="Run beside the cluster's real scheduler (--name is its schedulerName): decide "
            "every cycle, bind, evict and write nothing (read-only RBAC is enough; no Lease), "
            "and record in --history-dir when each workload would have started against when "
            "it did.",
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
    if shadow and history_dir is None:
        refuse("--shadow", "shadow-without-history", "a shadow keeps what it would have done "
               "only in the history", "add --history-dir DIR (a volume)")  # fmt: skip
    gpu_use = _gpu_use(gpu_metrics_url)
    name = name or ("default-scheduler" if shadow else "gpucarve")
    read_as = digest(policy)  # before the read: a change in between is picked up later
    loaded = policy_or_exit(policy, catalog)
    err = console(stderr=True)
    _refuse_instance_granularity(policy, loaded.policy, err)
    namespace, cm_name = _namespaced(
        "--mig-config-map", mig_config_map, "gpu-operator/gpucarve-mig-parted-config", err
    )
    if leader_pod is not None:
        _namespaced("--leader-pod", leader_pod, "gpucarve-system/gpucarve-0", err)
    client = client_or_exit(kubeconfig, context)
    try:
        client.get("/version")
    except ApiError as exc:
        err.print(Text(str(exc), style="red"))
        err.print(Text("fix: pass --kubeconfig for a cluster that is up (its current context)"))
        raise typer.Exit(Exit.INVALID) from None
    settings = ProcessSettings(
        policy_path=policy,
        policy_digest=read_as,
        catalog=catalog or [],
        config=SchedulerConfig(
            name=name,
            mig=HandoffConfig(namespace, cm_name, mig_propagation, mig_timeout),
            check_invariants=check_invariants,
        ),
        leader_elect=leader_elect and not shadow,
        lease_namespace=lease_namespace,
        lease_duration_s=lease_duration,
        identity=identity,
        health_host=health_host,
        health_port=health_port,
        leader_pod=leader_pod,
        reload_policy=reload_policy,
        policy_config_map=policy_config_map,
        history_dir=history_dir,
        history_bounds=history_bounds(history_max_mib, history_max_days),
        history_guard=_history_guard(client, loaded.policy, history_auth),
        shadow=shadow,
        would=WouldStart() if shadow else None,
        gpu_activity=None if gpu_use is None else ActivityFeed(gpu_use),
    )
    book = None if settings.would is None else settings.would.summary
    dashboard = partial(
        _dashboard, client, loaded.policy, dashboard_auth, dashboard_host, dashboard_port, book,
        gpu_use,
    )  # fmt: skip
    try:
        code = run_process(client, loaded.policy, settings, dashboard)
    except PortTaken as exc:
        err.print(Text(str(exc), style="red"))
        err.print(Text("fix: pick a free port"))
        raise typer.Exit(Exit.INVALID) from None
    if code:
        raise typer.Exit(code)


def _gpu_use(url: str | None) -> PrometheusGpuUse | None:
    """The Prometheus the dashboard and the idleness rules read GPU metrics from
    (--gpu-metrics-url), if any."""
    if url is None:
        return None
    if not url.startswith(("http://", "https://")) or len(url.split("//", 1)[1]) == 0:
        refuse("--gpu-metrics-url", "not-a-url", f"{url!r} is not an http(s) URL",
               "give Prometheus's base URL, e.g. http://prometheus.monitoring:9090")  # fmt: skip
    return PrometheusGpuUse(url)


def _dashboard(
    client: Client,
    first: Policy,
    auth: DashboardAuth,
    host: str,
    port: int,
    shadow: Shadow | None = None,
    gpu_use: PrometheusGpuUse | None = None,
) -> Dashboard | None:
    """The dashboard on host:port (port 0: none). The access reviews ask about the
    namespaces of the policy of the last cycle shown (`first` before any)."""
    if not port:
        return None
    board = Board()

    def namespaces() -> list[str]:
        got = board.latest()
        policy = got[1].policy if got is not None else first
        return [ns for q in policy.queues for ns in q.namespaces]

    access = Open() if auth is DashboardAuth.NONE else KubeAccess(client, namespaces)
    server = ThreadServer(dashboard_app(board, access, shadow, gpu_use), host, port, "dashboard")
    try:
        server.start()
    except OSError as exc:
        raise PortTaken("--dashboard-port", port, exc) from None
    log.info("dashboard on %s:%d", host, server.port)
    return Dashboard(board.observe, server)


def _history_guard(client: Client, policy: Policy, auth: DashboardAuth) -> HistoryGuard:
    """/history's guard: the dashboard's access reviews (its token reviewed, what the user may
    list asked of the API server; the answers kept per token for a while). The reviews are
    questions, not writes: a shadow's read-only client would refuse to send them, so they go
    through the client as given (its RBAC needs create on tokenreviews and
    subjectaccessreviews)."""
    if auth is DashboardAuth.NONE:
        return everyone
    access = KubeAccess(client, lambda: [ns for q in policy.queues for ns in q.namespaces])

    def guard(authorization: str | None) -> frozenset[str] | None:
        try:
            viewer = access.viewer(authorization)
        except Denied as exc:
            raise HistoryDenied(exc.status, str(exc)) from None
        return None if viewer.cluster else viewer.namespaces

    return guard


def _namespaced(flag: str, value: str, example: str, err: Console) -> tuple[str, str]:
    """NAMESPACE/NAME, or the process exits naming the flag and the fix."""
    namespace, _, name = value.partition("/")
    if not namespace or not name or "/" in name:
        err.print(Text(f"{flag} {value!r} is not NAMESPACE/NAME", style="red"))
        err.print(Text(f"fix: e.g. {flag} {example}"))
        raise typer.Exit(Exit.INVALID)
    return namespace, name


def _refuse_instance_granularity(path: Path, policy: Policy, err: Console) -> None:
    for i, pool in enumerate(policy.pools):
        # a DRA pool's partitions are created per allocation: instances in use stay there
        dra = pool.devices is DeviceApi.DRA
        if pool.mig_dynamic is not None and pool.mig_dynamic.keep_in_use and not dra:
            err.print(
                Text(
                    f"{path}: pools[{i}].mig.dynamic.granularity: pool {pool.name} asks for "
                    "`instance`, which keeps instances in use while their GPU changes; the GPU "
                    "Operator's MIG manager recreates every instance of a GPU it changes",
                    style="red",
                )
            )
            err.print(Text("fix: use `granularity: gpu` (the default) on Kubernetes"))
            raise typer.Exit(Exit.INVALID)
