"""`gpucarve dev-cluster`: a real local control plane with fake GPU nodes from a policy."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text

from gpucarve.cli.common import CatalogOption, policy_or_exit
from gpucarve.cli.output import Exit, console
from gpucarve.core.policy import Policy
from gpucarve.devcluster import scheduler as gpucarve_scheduler
from gpucarve.devcluster.procs import StackError
from gpucarve.devcluster.stack import LocalStack, find_binaries, needed_binaries

app = typer.Typer(
    rich_markup_mode=None,
    help="A local Kubernetes control plane with fake GPU nodes.",
    no_args_is_help=True,
)

DirOption = Annotated[
    Path, typer.Option("--dir", help="Where the cluster keeps its state, logs and kubeconfigs.")
]
DEFAULT_DIR = Path(".gpucarve/dev-cluster")


@app.command("up")
def up(
    policy: Annotated[Path, typer.Option("--policy", help="Policy YAML whose pools to fake.")],
    state: DirOption = DEFAULT_DIR,
    catalog: CatalogOption = None,
    webhook: Annotated[
        bool,
        typer.Option(help="Run gpucarve's admission webhook, wired in as the chart wires it."),
    ] = True,
    controllers: Annotated[
        bool,
        typer.Option(help="Run kube-controller-manager: workloads make pods, quotas count."),
    ] = True,
    kube_scheduler: Annotated[
        bool,
        typer.Option(help="Run kube-scheduler for the pods gpucarve does not govern."),
    ] = True,
    scheduler: Annotated[
        bool,
        typer.Option(
            help="Apply the policy's CRDs, priority classes and queues and run gpucarve's "
            "scheduler, its dashboard on loopback: GPU pods bind with no further command."
        ),
    ] = True,
) -> None:
    """Start etcd, kube-apiserver, kwok, the controllers, kube-scheduler, the admission
    webhook and gpucarve's scheduler on loopback (the stack as gpucarve ships onto a cluster)
    and create the policy's nodes (GPU capacity, allocatable and GPU Feature Discovery labels,
    as the device plugin publishes them for each pool's sharing mode; DRA pools'
    ResourceSlices). Prints the kubeconfig to use and what to try next."""
    loaded = policy_or_exit(policy, catalog)
    err = console(stderr=True)
    if (state / "pids.json").exists():
        err.print(Text(f"a dev cluster already runs from {state}", style="red"))
        err.print(Text(f"fix: gpucarve dev-cluster down --dir {state}"))
        raise typer.Exit(Exit.INVALID)
    if state.exists() and not state.is_dir():
        err.print(Text(f"--dir {state} is a file, not a folder", style="red"))
        err.print(Text("fix: pass a folder (it is created when missing)"))
        raise typer.Exit(Exit.INVALID)
    off = {part: f"--no-{part}" for part, on in
           (("webhook", webhook), ("controllers", controllers), ("kube-scheduler", kube_scheduler))
           if not on}  # fmt: skip
    try:
        stack = LocalStack(
            find_binaries(needed=needed_binaries(off), progress=lambda line: err.print(Text(line))),
            state.resolve(),
            policy.resolve(),
            off,
        )
    except StackError as exc:
        err.print(Text(f"could not start the dev cluster: {exc}", style="red"))
        raise typer.Exit(Exit.INVALID) from None
    started: gpucarve_scheduler.Started | None = None
    try:
        nodes = stack.start().add_policy_nodes(loaded.policy)
        # The dev cluster fakes nodes the GPU Operator manages, so it has what the operator
        # leaves on a cluster too: its namespace, where its MIG manager reads the layouts the
        # scheduler writes (the scheduler's default --mig-config-map, the chart's
        # migHandoff.namespace), and the `nvidia` RuntimeClass GPU containers run under (the
        # chart's node agent asks for it).
        stack.post("/api/v1/namespaces", _namespace(GPU_OPERATOR_NAMESPACE))
        stack.post("/apis/node.k8s.io/v1/runtimeclasses", NVIDIA_RUNTIME_CLASS)
        if scheduler:
            err.print(Text("starting gpucarve's scheduler (gpucarve apply, then the scheduler)"))
            gpucarve_scheduler.apply_policy(policy.resolve(), stack.kubeconfig())
            started = gpucarve_scheduler.start(policy.resolve(), stack.kubeconfig(), stack.workdir)
    except (StackError, OSError) as exc:
        stack.stop()
        err.print(Text(f"could not start the dev cluster: {exc}", style="red"))
        raise typer.Exit(Exit.INVALID) from None
    # Leave the processes running: `down` stops them by PID.
    pids = stack.detach()
    if started is not None:
        pids["scheduler"] = started.proc.pid
    (state / "pids.json").write_text(json.dumps(pids, sort_keys=True))
    out = console()
    out.print(f"dev cluster up: {stack.server}, {nodes} fake GPU nodes from {policy}")
    out.print(Text(f"export KUBECONFIG={stack.kubeconfig()}", style="bold"))
    if webhook:
        out.print(f"admission webhook: {state / 'webhook.log'}")
    if started is not None:
        out.print(f"gpucarve scheduler: {state / 'scheduler.log'}")
        out.print(
            f"dashboard: {started.dashboard} (sign in with the token in {stack.kubeconfig()})"
        )
        _next_steps(out, loaded.policy, policy)
    else:
        out.print(
            f"next: gpucarve apply --policy {policy}, then gpucarve scheduler --policy {policy}"
        )
    out.print(f"stop it with: gpucarve dev-cluster down --dir {state}")


GPU_OPERATOR_NAMESPACE = "gpu-operator"
NVIDIA_RUNTIME_CLASS = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                        "metadata": {"name": "nvidia"}, "handler": "nvidia"}  # fmt: skip


def _namespace(name: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def _next_steps(out: Console, policy: Policy, policy_file: Path) -> None:
    """A first GPU pod, asking for the device-plugin resource of a flavor a queue with a
    namespace has quota for (a whole GPU where one has), and how to ask why one waits (none
    where every flavor is claimed through DRA: such a pod needs a ResourceClaim)."""
    found = [
        (q.namespaces[0], f.resource_name)
        for q in policy.queues
        if q.namespaces
        for f in policy.flavors.values()
        if not f.dra and policy.quota_keys(q, f.name)  # its own quota, or its GPU unit's
    ]
    if not found:
        return
    # a whole GPU, as the README's first pod asks, where some queue has one
    ns, resource = next((c for c in found if c[1] == "nvidia.com/gpu"), found[0])
    pod = json.dumps(
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": "hello-gpu", "namespace": ns},
         "spec": {"schedulerName": "gpucarve",
                  "containers": [{"name": "main", "image": "fake",
                                  "resources": {"limits": {resource: 1}}}]}},
        separators=(",", ":"),
    )  # fmt: skip
    out.print("next: a first GPU pod (it binds to a fake node; kwok runs no container):")
    out.print(Text(f"  echo '{pod}' | kubectl apply -f -"), soft_wrap=True)
    out.print(
        f"  kubectl get pod -n {ns} hello-gpu -o wide; "
        f"gpucarve explain {ns}/hello-gpu --policy {policy_file}"
    )


def _gone(pid: int) -> bool:
    """Whether the process has exited (reaping it when it is our own child)."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return True
    except ChildProcessError:
        pass  # not our child: `up` ran in another process
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@app.command("down")
def down(state: DirOption = DEFAULT_DIR) -> None:
    """Stop the dev cluster started from `--dir` (by PID) and keep its logs."""
    pid_file = state / "pids.json"
    if not pid_file.exists():
        console(stderr=True).print(Text(f"no dev cluster runs from {state}", style="yellow"))
        raise typer.Exit(Exit.INVALID)
    try:
        loaded = json.loads(pid_file.read_text())
    except (OSError, ValueError) as exc:
        loaded = exc
    if not isinstance(loaded, dict) or not all(isinstance(v, int) for v in loaded.values()):
        err = console(stderr=True)
        err.print(Text(f"{pid_file} is not the PID file `up` wrote ({loaded})", style="red"))
        err.print(Text("fix: stop the processes by hand (see the *.log files), then remove it"))
        raise typer.Exit(Exit.INVALID)
    pids: dict[str, int] = loaded
    for name in ("scheduler", "webhook", "kube-scheduler", "kube-controller-manager", "kwok",
                 "kube-apiserver", "etcd"):  # fmt: skip
        pid = pids.get(name)
        if pid is None:
            continue
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        for _ in range(100):
            if _gone(pid):
                break
            time.sleep(0.1)
        else:
            os.kill(pid, signal.SIGKILL)
            _gone(pid)
    pid_file.unlink()
    console().print(f"dev cluster in {state} stopped")
