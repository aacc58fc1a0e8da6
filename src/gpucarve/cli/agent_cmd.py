"""`gpucarve node-agent`: the GPU health agent of one node (a DaemonSet's pod on each GPU node)."""

from __future__ import annotations

import signal
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from gpucarve.agent.health_loop import NodeAgent
from gpucarve.agent.readings import POD_RESOURCES_SOCKET
from gpucarve.cli.common import CatalogOption, policy_or_exit
from gpucarve.cli.kube_options import (
    ContextOption,
    KubeconfigOption,
    api_error_exit,
    client_or_exit,
)
from gpucarve.cli.output import Exit, console
from gpucarve.kube.api.client import ApiError


def node_agent(
    node: Annotated[
        str, typer.Option("--node", help="This node's name (the pod's spec.nodeName).")
    ],
    policy: Annotated[Path, typer.Option("--policy", help="The policy (its gpuHealth block).")],
    once: Annotated[bool, typer.Option("--once", help="One check, then exit.")] = False,
    pod_resources: Annotated[
        str,
        typer.Option(
            "--pod-resources-socket",
            help="The kubelet's PodResources socket: which devices pods really got, written "
            "onto the Node for the scheduler ('' to skip).",
        ),
    ] = POD_RESOURCES_SOCKET,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    catalog: CatalogOption = None,
) -> None:
    """Read every GPU through NVML each `gpuHealth.checkSeconds` (XIDs as they come), take
    failing GPUs out of service on the Node with hysteresis, and bring them back after clean
    checks; the scheduler places nothing new on a GPU out of service."""
    health = policy_or_exit(policy, catalog).policy.gpu_health
    client = client_or_exit(kubeconfig, context)
    try:
        from gpucarve.agent.nvml_source import NvmlSource

        source = NvmlSource()
    except Exception as exc:  # pynvml raises its own errors when libnvidia-ml is missing
        err = console(stderr=True)
        err.print(Text(f"NVML cannot be used here: {exc}", style="red"))
        err.print(Text("fix: run the agent on a GPU node with the NVIDIA driver installed"))
        raise typer.Exit(Exit.INVALID) from None
    devices = None
    if pod_resources:
        # gRPC is loaded only by the agent, not by every gpucarve command
        from gpucarve.agent.pod_devices import list_pod_devices
        from gpucarve.agent.publisher import PodDevicesPublisher

        devices = PodDevicesPublisher(client, node, lambda: list_pod_devices(pod_resources), source)
    agent = NodeAgent(client, node, source, health, lambda: datetime.now(UTC), devices)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        agent.check()
        while not once and not stop.is_set():
            agent.check(xid_wait_ms=health.check_s * 1000)
    except ApiError as err:
        api_error_exit(err)
