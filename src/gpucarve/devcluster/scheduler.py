"""gpucarve's scheduler on the dev cluster: the policy's CRDs, priority classes and queues
applied (`gpucarve apply`), then `gpucarve scheduler` started beside the stack with its probes
and dashboard on loopback, so that a GPU pod created after `dev-cluster up` binds with no
further command. Both run as an operator runs them (the commands, not the rooms behind them),
as the administrator the dev cluster's kubeconfig names: the chart's least-privilege roles are
proven by the RBAC scenario, not here."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from gpucarve.devcluster.procs import StackError, free_ports


@dataclass(frozen=True)
class Started:
    proc: subprocess.Popen[bytes]
    health_port: int
    dashboard_port: int
    log: Path

    @property
    def dashboard(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"


def apply_policy(policy: Path, kubeconfig: Path) -> None:
    """`gpucarve apply`: the CRDs, the policy's priority classes and its queues."""
    done = subprocess.run(
        [sys.executable, "-m", "gpucarve", "apply", "--policy", str(policy),
         "--kubeconfig", str(kubeconfig)],
        capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    if done.returncode != 0:
        raise StackError(f"gpucarve apply failed: {(done.stderr or done.stdout)[-600:]}")


def start(policy: Path, kubeconfig: Path, workdir: Path, timeout_s: float = 90.0) -> Started:
    """Start `gpucarve scheduler` (in a session of its own: it outlives this process, as the
    dev cluster's other parts do) and wait until its readiness probe answers: it has read the
    cluster and run a cycle."""
    health, board = free_ports(2)
    log = workdir / "scheduler.log"
    args = [sys.executable, "-m", "gpucarve", "scheduler", "--policy", str(policy),
            "--kubeconfig", str(kubeconfig), "--no-leader-elect",
            "--health-port", str(health), "--health-host", "127.0.0.1",
            "--dashboard-port", str(board), "--dashboard-host", "127.0.0.1"]  # fmt: skip
    with log.open("ab") as out:
        proc = subprocess.Popen(
            args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise StackError(f"the scheduler exited with {proc.returncode}; see {log}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{health}/readyz", timeout=2) as r:
                if r.status == 200:
                    return Started(proc, health, board, log)
        except OSError:
            time.sleep(0.3)
    proc.kill()
    proc.wait(5)
    raise StackError(f"the scheduler was not ready in {timeout_s:g} s; see {log}")
