"""End-to-end binding speed of `gpucarve scheduler` on a real kube-apiserver.

    python bench/bind.py [--nodes 1000] [--pods 5000] [--workers 8] [--kwok] [--json]

Starts etcd, kube-apiserver and kwok on loopback (tools/testenv.sh builds them), creates
`--nodes` fake 8-GPU H100 nodes and one queue, starts the scheduler as its own process, then
creates `--pods` single-GPU pods from `--workers` threads as fast as the API server takes them.
A watch records when each pod is seen bound. Like kube-scheduler's own benchmark (scheduler_perf),
no kubelet runs by default: the nodes are created Ready and bound pods stay Pending; `--kwok`
adds kwok's fake kubelets, which write every bound pod's status as well. Prints pods/s from the
first creation to the last binding, and the p50/p99/max time from a pod's creation to its
binding. Targets: >= 180 pods/s
(kube-scheduler's CI floor for extended-resource pods) and p99 <= 5 s (the pod-startup SLO).
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from figures import print_figures

from gpucarve.config.policy_build import load_policy
from gpucarve.kube.client import Client
from gpucarve.kube.nodes import node_manifests
from gpucarve.kube.stack import LocalStack, find_binaries

POLICY = """
apiVersion: gpucarve.io/v1alpha1
kind: Policy
metadata: {{name: bind-bench}}
pools:
  - name: gpus
    gpuModel: H100-SXM5-80GB
    nodes: {nodes}
    gpusPerNode: 8
    cpusPerNode: 192
    memoryGiBPerNode: 2048
    sharing: exclusive
    nodeLabels: {{gpucarve.io/pool: gpus}}
queues:
  - name: bench
    namespaces: [bench]
    quota:
      h100-full: {{nominal: {gpus}}}
"""


def _pod(name: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "bench"},
        "spec": {
            "schedulerName": "gpucarve",
            "containers": [
                {
                    "name": "main",
                    "image": "fake",
                    "resources": {
                        "requests": {"cpu": "1", "nvidia.com/gpu": "1"},
                        "limits": {"nvidia.com/gpu": "1"},
                    },
                }
            ],
        },
    }


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--pods", type=int, default=5000)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--kwok", action="store_true", help="run kwok's fake kubelets too")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gpucarve-bind-"))
    policy_file = work / "policy.yaml"
    policy_file.write_text(POLICY.format(nodes=args.nodes, gpus=args.nodes * 8))
    policy = load_policy(policy_file, []).policy
    nodes = node_manifests(policy)
    for n in nodes:
        n["status"]["conditions"] = [{"type": "Ready", "status": "True", "reason": "Bench"}]
    with LocalStack(find_binaries(), work / "kube", with_kwok=args.kwok) as stack:
        client = Client.from_kubeconfig(stack.kubeconfig())
        client.call(
            "POST",
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench"}},
        )
        with ThreadPoolExecutor(args.workers) as ex:
            list(ex.map(lambda m: client.call("POST", "/api/v1/nodes", m), nodes))
        log = (work / "scheduler.log").open("wb")
        sched = subprocess.Popen(
            [sys.executable, "-m", "gpucarve", "scheduler", "--policy", str(policy_file),
             "--kubeconfig", str(stack.kubeconfig()), "--no-leader-elect"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        created: dict[str, float] = {}
        bound: dict[str, float] = {}
        done = threading.Event()
        version = client.get("/api/v1/namespaces/bench/pods")["metadata"]["resourceVersion"]

        def watch() -> None:
            rv = version
            while not done.is_set():
                for ev in client.watch("/api/v1/namespaces/bench/pods", rv, 30):
                    obj = ev["object"]
                    rv = obj["metadata"].get("resourceVersion", rv)
                    name = obj["metadata"].get("name")
                    if (obj.get("spec") or {}).get("nodeName") and name not in bound:
                        bound[name] = time.monotonic()
                        if len(bound) == args.pods:
                            done.set()
                            return

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        time.sleep(3)  # let the scheduler list the nodes

        def create(i: int) -> None:
            name = f"p{i:05d}"
            start = time.monotonic()
            client.call("POST", "/api/v1/namespaces/bench/pods", _pod(name))
            created[name] = start

        first = time.monotonic()
        with ThreadPoolExecutor(args.workers) as ex:
            list(ex.map(create, range(args.pods)))
        created_s = time.monotonic() - first
        finished = done.wait(600)
        sched.send_signal(signal.SIGTERM)
        sched.wait(30)
        if not finished:
            sys.exit(f"only {len(bound)} of {args.pods} pods bound in 10 min; see {log.name}")
        latencies = [bound[n] - created[n] for n in created]
        total = max(bound.values()) - first
        print_figures(
            {
                "nodes": args.nodes,
                "kubelets": "kwok" if args.kwok else "none",
                "pods": args.pods,
                "creation pods/s": round(args.pods / created_s, 1),
                "pods/s (first creation to last binding)": round(args.pods / total, 1),
                "p50 creation→bound s": round(_percentile(latencies, 0.5), 2),
                "p99 creation→bound s": round(_percentile(latencies, 0.99), 2),
                "max creation→bound s": round(max(latencies), 2),
            },
            args.json,
        )


if __name__ == "__main__":
    main()
