"""The pods `bench/bind.py` creates, the processes that create them, and kube-scheduler.

Creation runs in `--creators` processes of `--workers` threads each, every one with its own
client and keep-alive connections, so the creating side is not what the figure measures: one
Python process manages about 250 pods/s on two cores, which was the cap the issue found.
Each process records the monotonic time (the same clock in every process on Linux) just before
each POST, and they all start at one signal once their clients are ready.

With a `rate` the pods are created at that pace instead (pod i at i / rate seconds after the
start, whichever process holds it): the load of the pod-startup SLO's density tests, where the
figure is the latency of a scheduler that keeps up rather than the length of a queue.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from gpucarve.devcluster.procs import free_port
from gpucarve.kube.api.client import Client

WORKLOADS = ("whole", "mig", "mix", "dra", "dra-mig")
# The dra-mig workload: each pod claims one MIG partition of an H100 whose GPUs are carved on
# demand (partitionable devices), the profiles in this repeating order (11 of 8 memory slices
# per GPU for every six pods)
DRA_MIG_PROFILES = ("1g.10gb", "2g.20gb", "1g.10gb", "3g.40gb", "1g.10gb", "2g.20gb")
DRA_MIG_SLICES = {"1g.10gb": 1, "2g.20gb": 2, "3g.40gb": 4}
GANG = 8  # the mix workload: every fourth batch of eight pods is one all-or-nothing gang
MIG = "nvidia.com/mig-1g.10gb"


def pod_names(count: int) -> list[str]:
    return [f"p{i:05d}" for i in range(count)]


def claim_name(pod_name: str) -> str:
    """The dra workload: each pod's own ResourceClaim (one H100), made before the clock
    starts, so that what is timed is the scheduler, not kube-controller-manager making claims
    from a template (about 10 a second, whichever scheduler runs)."""
    return f"{pod_name}-gpu"


def claim(pod_name: str, workload: str = "dra", index: int = 0) -> dict[str, Any]:
    request: dict[str, Any] = {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}
    if workload == "dra-mig":
        profile = DRA_MIG_PROFILES[index % len(DRA_MIG_PROFILES)]
        expression = f'device.attributes["gpu.nvidia.com"].profile == "{profile}"'
        request["exactly"] = {
            "deviceClassName": "mig.nvidia.com",
            "selectors": [{"cel": {"expression": expression}}],
        }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": claim_name(pod_name), "namespace": "bench"},
        "spec": {"devices": {"requests": [request]}},
    }


def pod(name: str, workload: str, scheduler: str, index: int) -> dict[str, Any]:
    resource = MIG if workload == "mig" else "nvidia.com/gpu"
    meta: dict[str, Any] = {"name": name, "namespace": "bench"}
    if workload == "mix" and (index // GANG) % 4 == 0:
        meta["labels"] = {"gpucarve.io/pod-group": f"g{index // GANG:05d}"}
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "main",
                "image": "fake",
                "resources": {
                    "requests": {"cpu": "1", resource: "1"},
                    "limits": {resource: "1"},
                },
            }
        ],
    }
    if workload in ("dra", "dra-mig"):
        spec["containers"][0]["resources"] = {
            "requests": {"cpu": "1"},
            "claims": [{"name": "gpu"}],
        }
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim_name(name)}]
    if scheduler in ("gpucarve", "plumbing"):
        spec["schedulerName"] = "gpucarve"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def _creator(
    kubeconfig: str,
    names: list[tuple[int, str]],
    workload: str,
    scheduler: str,
    threads: int,
    ready: Any,
    go: Any,
    out: Any,
    rate: float | None = None,
) -> None:
    client = Client.from_kubeconfig(kubeconfig)
    created: dict[str, float] = {}
    failed: list[str] = []

    go_at = [0.0]  # when this process was told to start

    def create(item: tuple[int, str]) -> None:
        i, name = item
        if rate is not None:
            time.sleep(max(0.0, go_at[0] + i / rate - time.monotonic()))
        start = time.monotonic()
        try:
            client.call("POST", "/api/v1/namespaces/bench/pods", pod(name, workload, scheduler, i))
        except Exception as err:
            failed.append(f"{name}: {err}")
            return
        created[name] = start

    with ThreadPoolExecutor(threads) as ex:
        # one call per thread first, so every connection is open before the start
        list(ex.map(lambda _: client.get("/api/v1/namespaces/bench"), range(threads)))
        ready.put(1)
        go.wait()
        go_at[0] = time.monotonic()
        list(ex.map(create, names))
    out.put((created, failed))


def create_all(
    kubeconfig: Path,
    count: int,
    workload: str,
    scheduler: str,
    processes: int,
    threads: int,
    rate: float | None = None,
) -> tuple[dict[str, float], float]:
    """Create `count` pods (at `rate` pods/s, or as fast as the API server takes them); their
    creation times and the seconds creation took."""
    ctx = mp.get_context("spawn")  # the parent runs a watch thread: no fork
    ready, out, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    items = list(enumerate(pod_names(count)))
    procs = [
        ctx.Process(
            target=_creator,
            args=(
                str(kubeconfig),
                items[k::processes],
                workload,
                scheduler,
                threads,
                ready,
                go,
                out,
                rate,
            ),
        )
        for k in range(processes)
    ]
    for p in procs:
        p.start()
    for _ in procs:
        ready.get(timeout=120)
    first = time.monotonic()
    go.set()
    created: dict[str, float] = {}
    problems: list[str] = []
    for _ in procs:
        try:
            part, failed = out.get(timeout=900)
        except queue.Empty:
            sys.exit("a creating process gave no result in 15 min")
        created.update(part)
        problems += failed
    took = time.monotonic() - first
    for p in procs:
        p.join(30)
    if problems:
        sys.exit(f"{len(problems)} pods not created, first: {problems[0]}")
    return created, took


SCHEDULER_CONFIG = """apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: {kubeconfig}
  qps: 5000
  burst: 5000
leaderElection:
  leaderElect: false
"""


def start_kube_scheduler(
    bin_dir: Path, kubeconfig: Path, work: Path, log: Any
) -> subprocess.Popen[bytes]:
    """kube-scheduler with its default plugins and the client limits scheduler_perf uses
    (its own 50 QPS default would measure the rate limiter, not the scheduler)."""
    binary = bin_dir / "kube-scheduler"
    if not binary.is_file():
        sys.exit(f"{binary} not found: run tools/testenv.sh, which builds it")
    config = work / "kube-scheduler.yaml"
    config.write_text(SCHEDULER_CONFIG.format(kubeconfig=kubeconfig))
    return subprocess.Popen(
        [str(binary), f"--config={config}", "--bind-address=127.0.0.1",
         f"--secure-port={free_port()}", "-v=1"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip


def h100_pool(nodes: int, sharing: str = "sharing: exclusive") -> str:
    """The benches' pool, as a policy's `pools:` entry: `nodes` nodes of eight H100s."""
    return POOL.format(nodes=nodes, sharing=sharing)


POOL = """  - name: gpus
    gpuModel: H100-SXM5-80GB
    nodes: {nodes}
    gpusPerNode: 8
    cpusPerNode: 192
    memoryGiBPerNode: 2048
    {sharing}
    nodeLabels: {{gpucarve.io/pool: gpus}}
"""


def rss_mib(pid: int) -> tuple[float, float]:
    """A process's resident memory now and at its peak (VmRSS, VmHWM), MiB."""
    fields: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) / 1024
    return round(fields.get("VmRSS", 0.0), 1), round(fields.get("VmHWM", 0.0), 1)
