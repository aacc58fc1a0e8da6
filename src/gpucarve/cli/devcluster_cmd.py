"""`gpucarve dev-cluster`: a real local control plane with fake GPU nodes from a policy."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.text import Text

from gpucarve.cli.common import CatalogOption, policy_or_exit
from gpucarve.cli.output import Exit, console
from gpucarve.core.policy import Policy
from gpucarve.devcluster.stack import ADMIN_USER, LocalStack, StackError, find_binaries, free_port
from gpucarve.devcluster.webhook import configurations
from gpucarve.devcluster.webhook import start as start_webhook
from gpucarve.kube.view.nodes import node_manifests, slice_manifests
from gpucarve.render.dra import device_classes

app = typer.Typer(
    rich_markup_mode=None,
    help="A local Kubernetes control plane with fake GPU nodes.",
    no_args_is_help=True,
)

DirOption = Annotated[
    Path, typer.Option("--dir", help="Where the cluster keeps its state, logs and kubeconfigs.")
]
DEFAULT_DIR = Path(".gpucarve/dev-cluster")


def _post(stack: LocalStack, path: str, body: dict[str, Any]) -> None:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    req = urllib.request.Request(
        stack.server + path,
        data=json.dumps(body).encode(),
        method="POST",
        headers={
            "Authorization": f"Bearer {stack.tokens[ADMIN_USER]}",
            "Content-Type": "application/json",
        },
    )
    try:
        urllib.request.urlopen(req, context=ctx, timeout=10).close()
    except urllib.error.HTTPError as err:
        if err.code != 409:  # already there
            raise StackError(f"POST {path}: {err.code} {err.read()[:300]!r}") from None


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
        typer.Option(help="Run kube-controller-manager: Deployments and Jobs make pods."),
    ] = True,
) -> None:
    """Start etcd, kube-apiserver, kwok, the controllers and the admission webhook on loopback
    and create the policy's nodes (GPU capacity, allocatable and GPU Feature Discovery labels,
    as the device plugin publishes them for each pool's sharing mode). Prints the kubeconfig
    to use."""
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
    needed = ["etcd", "kube-apiserver", "kwok", "kwok-stages.yaml"]
    if controllers:
        needed.append("kube-controller-manager")
    try:
        stack = LocalStack(
            find_binaries(needed=needed), state.resolve(), with_controllers=controllers
        ).start()
    except (StackError, OSError) as exc:
        err.print(Text(f"could not start the dev cluster: {exc}", style="red"))
        raise typer.Exit(Exit.INVALID) from None
    extra: dict[str, int] = {}
    try:
        nodes = node_manifests(loaded.policy)
        for m in nodes:
            _post(stack, "/api/v1/nodes", m)
        # DRA pools: the DeviceClass and the GPUs NVIDIA's DRA driver would publish
        for m in device_classes(loaded.policy):
            _post(stack, "/apis/resource.k8s.io/v1/deviceclasses", m)
        for m in slice_manifests(loaded.policy):
            _post(stack, "/apis/resource.k8s.io/v1/resourceslices", m)
        if webhook:
            extra["webhook"] = _wire_webhook(stack, policy.resolve(), loaded.policy, state)
    except StackError as exc:
        stack.stop()
        _stop(extra)
        err.print(Text(str(exc), style="red"))
        raise typer.Exit(Exit.INVALID) from None
    # Leave the processes running: `down` stops them by PID.
    pids = {**stack.detach(), **extra}
    (state / "pids.json").write_text(json.dumps(pids, sort_keys=True))
    out = console()
    out.print(f"dev cluster up: {stack.server}, {len(nodes)} fake GPU nodes from {policy}")
    out.print(Text(f"export KUBECONFIG={stack.kubeconfig()}", style="bold"))
    if webhook:
        out.print(f"admission webhook: {state / 'webhook.log'}")
    out.print(f"stop it with: gpucarve dev-cluster down --dir {state}")


def _wire_webhook(stack: LocalStack, policy_file: Path, policy: Policy, state: Path) -> int:
    """The webhook process and its configurations; the namespaces its queues list, so that
    pods can be created in them at once."""
    port = free_port()
    pid, ca = start_webhook(policy_file, state.resolve(), port)
    governed = sorted({ns for q in policy.queues for ns in q.namespaces})
    for ns in governed:
        _post(stack, "/api/v1/namespaces",
              {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})  # fmt: skip
    for plural, body in configurations(f"https://127.0.0.1:{port}", ca, governed):
        _post(stack, f"/apis/admissionregistration.k8s.io/v1/{plural}", body)
    return pid


def _stop(pids: dict[str, int]) -> None:
    for pid in pids.values():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)


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
    for name in ("webhook", "kube-controller-manager", "kwok", "kube-apiserver", "etcd"):
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
