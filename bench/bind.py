"""End-to-end binding speed on a real kube-apiserver, gpucarve and kube-scheduler side by side.

    python bench/bind.py [--nodes 1000] [--pods 5000]
                         [--scheduler gpucarve|kube-scheduler|both|plumbing]
                         [--workload whole|mig|mix] [--creators 4] [--workers 8] [--rate R]
                         [--kwok] [--rounds N] [--json] [--profile FILE]

For each scheduler, one after the other in one run: etcd and kube-apiserver (and kwok) start
fresh on loopback (tools/testenv.sh builds them, kube-scheduler from the same Kubernetes module
as the API server), `--nodes` 8-GPU H100 nodes are created Ready, the scheduler starts as its own
process, and `--pods` pods are created from `--creators` processes as fast as the API server takes
them, or at `--rate` pods/s (paced, as the pod-startup SLO's density tests load a cluster: then
the latencies are those of a scheduler that keeps up, not the length of a queue that creation
faster than any binding builds). A watch of bound pods records when each is seen bound. Like
kube-scheduler's own benchmark (scheduler_perf) no kubelet runs by default; `--kwok` adds kwok's
fake kubelets.

Workloads: `whole` (one `nvidia.com/gpu` each), `mig` (one `nvidia.com/mig-1g.10gb` each, on nodes
of seven 1g.10gb per GPU), `mix` (whole-GPU pods, every fourth batch of eight an all-or-nothing
gang: gpucarve only, since kube-scheduler has no gangs), `dra` (each pod claims one H100 with a
ResourceClaim of its own, of device class gpu.nvidia.com, made before the clock starts; the
nodes' GPUs are published in ResourceSlices as NVIDIA's DRA driver would, and the scheduler
allocates the claim: gpucarve itself, kube-scheduler with its DRA plugin), `dra-mig` (each pod
claims one MIG partition, 1g.10gb, 2g.20gb or 3g.40gb in a repeating order, of H100s published
as partitionable devices: every placement of every profile, consuming its GPU's memory-slice
counters; gpucarve carves the GPUs as its dynamic MIG decides, kube-scheduler allocates the
devices its DRA plugin picks).

Prints, per scheduler: pods/s from the first creation to the last binding, p50/p99/max from a
pod's creation to its binding, the scheduler's resident memory (now and peak), for `dra-mig`
what the allocated partitions leave (from the claims: the GPUs still whole, the 3g.40gb
partitions that still fit, and the free memory slices no 3g.40gb can use: stranded), and with `both`
gpucarve's pods/s and p99 as a ratio of kube-scheduler's, and gpucarve's cycles while it bound
(how many, and the engine's mean time in one: from its own `/metrics`). Targets: gpucarve's
pods/s >= kube-scheduler's on whole-GPU pods, p99 <= 5 s (the pod-startup SLO). `--profile
FILE` samples gpucarve's scheduler with py-spy (`pip install py-spy`) while it binds and prints
the functions that held the most samples. `--rounds N` (with `both`) runs the two N times,
alternating, and prints the first round's figures, each round's p99s and ratio, the median
ratio, and in how many rounds gpucarve's p99 was at most kube-scheduler's: on a shared machine
one run's ratio moves with the other processes as much as with either scheduler.
`--scheduler plumbing` (whole-GPU pods only) measures the floor under gpucarve's figures:
`bench/plumbing.py`, gpucarve's own client, pod informer and binding threads binding each pod to
the next node in turn with no decision at all.
"""

from __future__ import annotations

import argparse
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import profile_sched
from bind_load import (
    DRA_MIG_PROFILES,
    DRA_MIG_SLICES,
    WORKLOADS,
    claim,
    create_all,
    h100_pool,
    pod_names,
    rss_mib,
    start_kube_scheduler,
)
from figures import print_figures

from gpucarve.config.policy_build import load_policy
from gpucarve.core.policy import Policy
from gpucarve.devcluster.nodes import node_manifests, slice_manifests
from gpucarve.devcluster.stack import LocalStack, find_binaries
from gpucarve.kube.api.client import ApiError, Client
from gpucarve.render.dra import device_classes

RESOURCE = "/apis/resource.k8s.io/v1"

POLICY = """
apiVersion: gpucarve.io/v1alpha1
kind: Policy
metadata: {{name: bind-bench}}
pools:
{pool}queues:
  - name: bench
    namespaces: [bench]
    quota:
      {flavor}: {{nominal: {count}}}
"""


def policy_text(nodes: int, workload: str) -> str:
    if workload == "mig":
        sharing, flavor, count = (
            "sharing: mig\n    mig: {layout: {1g.10gb: 7}}",
            "h100-mig-1g.10gb",
            56,
        )
    elif workload == "dra":
        sharing, flavor, count = "sharing: exclusive\n    devices: dra", "h100-dra-full", 8
    elif workload == "dra-mig":
        sharing = (
            "sharing: mig\n    devices: dra\n    mig:\n"
            "      layout: {7g.80gb: 1}\n"
            "      dynamic: {profiles: [1g.10gb, 2g.20gb, 3g.40gb], maxGpusPerCycle: 10000}"
        )
        text = POLICY.format(pool=h100_pool(nodes, sharing), flavor="h100-dra-mig-1g.10gb",
                             count=nodes * 56)  # fmt: skip
        for profile, per_gpu in (("2g.20gb", 3), ("3g.40gb", 2), ("7g.80gb", 1)):
            text += f"      h100-dra-mig-{profile}: {{nominal: {nodes * 8 * per_gpu}}}\n"
        return text
    else:
        sharing, flavor, count = "sharing: exclusive", "h100-full", 8
    return POLICY.format(pool=h100_pool(nodes, sharing), flavor=flavor, count=nodes * count)


def _dra_objects(client: Client, policy: Policy, pods: int, workload: str) -> None:
    """The DeviceClasses, the nodes' ResourceSlices and each pod's claim."""
    for m in device_classes(policy):
        client.call("POST", f"{RESOURCE}/deviceclasses", m)
    path = f"{RESOURCE}/namespaces/bench/resourceclaims"
    with ThreadPoolExecutor(8) as ex:
        list(ex.map(lambda m: client.call("POST", f"{RESOURCE}/resourceslices", m),
                    slice_manifests(policy)))  # fmt: skip
        names = list(enumerate(pod_names(pods)))
        list(ex.map(lambda m: client.call("POST", path, claim(m[1], workload, m[0])), names))


_PARTITION = re.compile(r"^gpu-(\d+)-mig-\d+-(\d+)-(\d+)$")


def stranded(client: Client, nodes: int) -> dict[str, int]:
    """What the claims' allocated partitions leave on the H100s (8 memory slices a GPU; a
    3g.40gb starts at slice 0 or 4): GPUs still whole, 3g.40gb partitions that still fit, and
    free memory slices no 3g.40gb can use."""
    used: dict[tuple[str, int], set[int]] = {}
    for c in client.get(f"{RESOURCE}/namespaces/bench/resourceclaims")["items"]:
        alloc = (c.get("status") or {}).get("allocation") or {}
        for r in (alloc.get("devices") or {}).get("results") or []:
            m = _PARTITION.match(r["device"])
            if m is None:
                continue
            gpu, start, size = (int(g) for g in m.groups())
            used.setdefault((r["pool"], gpu), set()).update(range(start, start + size))
    whole = nodes * 8 - len(used)
    fits, lost = 0, 0
    for taken in used.values():
        halves = [h for h in (0, 4) if not taken & set(range(h, h + 4))]
        fits += len(halves)
        lost += 8 - len(taken) - 4 * len(halves)
    return {"GPUs whole": whole, "3g.40gb that fit": fits + 2 * whole, "stranded slices": lost}


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _watch_bound(client: Client, rv: str, want: int, bound: dict[str, float]) -> threading.Event:
    """Record when each pod is first seen bound; the event is set when `want` are."""
    done = threading.Event()

    def run() -> None:
        version = rv
        path = "/api/v1/namespaces/bench/pods?fieldSelector=spec.nodeName!%3D"
        while not done.is_set():
            try:
                for ev in client.watch(path, version, 30):
                    obj = ev["object"]
                    version = obj["metadata"].get("resourceVersion", version)
                    name = obj["metadata"].get("name")
                    if ev["type"] in ("ADDED", "MODIFIED") and name not in bound:
                        bound[name] = time.monotonic()
                        if len(bound) >= want:
                            done.set()
                            return
            except ApiError:
                time.sleep(0.5)

    threading.Thread(target=run, daemon=True).start()
    return done


def run_one(args: argparse.Namespace, scheduler: str, bin_dir: Path) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix=f"gpucarve-bind-{scheduler}-"))
    policy_file = work / "policy.yaml"
    policy_file.write_text(policy_text(args.nodes, args.workload))
    policy = load_policy(policy_file, []).policy
    assert policy is not None, "the bench's own policy is valid"
    nodes = node_manifests(policy)
    for n in nodes:
        n["status"]["conditions"] = [{"type": "Ready", "status": "True", "reason": "Bench"}]
    dra = args.workload in ("dra", "dra-mig")
    # each round runs the one scheduler it measures on a control plane of its own
    off = {
        "controllers": "the bench writes its pods itself",
        "kube-scheduler": "the bench starts the scheduler it measures itself",
        "webhook": "binding speed alone; bench/webhook.py measures the webhook",
    }
    if not args.kwok:
        off["kwok"] = "no kubelet, as kube-scheduler's own benchmark (scheduler_perf) runs"
    with LocalStack(bin_dir, work / "kube", off=off) as stack:
        client = Client.from_kubeconfig(stack.kubeconfig())
        ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench"}}
        client.call("POST", "/api/v1/namespaces", ns)
        with ThreadPoolExecutor(8) as ex:
            list(ex.map(lambda m: client.call("POST", "/api/v1/nodes", m), nodes))
        if dra:
            _dra_objects(client, policy, args.pods, args.workload)
        log = (work / "scheduler.log").open("wb")
        probes = _free_port()
        if scheduler == "plumbing":
            plumbing = Path(__file__).resolve().parent / "plumbing.py"
            sched = subprocess.Popen(
                [sys.executable, str(plumbing), str(stack.kubeconfig())],
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        elif scheduler == "gpucarve":
            sched = subprocess.Popen(
                [sys.executable, "-m", "gpucarve", "scheduler", "--policy", str(policy_file),
                 "--kubeconfig", str(stack.kubeconfig()), "--no-leader-elect",
                 "--health-host", "127.0.0.1", "--health-port", str(probes)],
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        else:
            sched = start_kube_scheduler(bin_dir, stack.kubeconfig(), work, log)
        bound: dict[str, float] = {}
        rv = client.get("/api/v1/namespaces/bench/pods")["metadata"]["resourceVersion"]
        done = _watch_bound(client, rv, args.pods, bound)
        time.sleep(5)  # the scheduler lists the nodes
        if sched.poll() is not None:
            sys.exit(f"{scheduler} exited with {sched.returncode}; see {log.name}")
        spy = None
        if args.profile is not None and scheduler == "gpucarve":
            spy = profile_sched.start(sched.pid, args.profile)
        created, created_s = create_all(
            stack.kubeconfig(),
            args.pods,
            args.workload,
            scheduler,
            args.creators,
            args.workers,
            args.rate,
        )
        finished = done.wait(900)
        rss, peak = rss_mib(sched.pid)
        cycles = _cycles(probes) if scheduler == "gpucarve" else {}
        if spy is not None:
            profile_sched.stop(spy)
        sched.send_signal(signal.SIGTERM)
        try:
            sched.wait(30)
        except subprocess.TimeoutExpired:
            sched.kill()
        if not finished:
            sys.exit(f"{scheduler}: only {len(bound)} of {args.pods} pods bound; see {log.name}")
        left = stranded(client, args.nodes) if args.workload == "dra-mig" else {}
    latencies = [bound[n] - created[n] for n in created]
    first = min(created.values())
    return {
        "pods/s": round(args.pods / (max(bound.values()) - first), 1),
        "creation pods/s": round(args.pods / created_s, 1),
        "p50 creation→bound s": round(_percentile(latencies, 0.5), 3),
        "p99 creation→bound s": round(_percentile(latencies, 0.99), 3),
        "max creation→bound s": round(max(latencies), 3),
        "scheduler RSS MiB": rss,
        "scheduler peak RSS MiB": peak,
        **cycles,
        **left,
    }


def _p99_ratio(results: dict[str, dict[str, Any]]) -> float:
    ours, theirs = results["gpucarve"], results["kube-scheduler"]
    return round(ours["p99 creation→bound s"] / max(theirs["p99 creation→bound s"], 0.01), 2)


def _rounds(rounds: list[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """Each round's p99s and ratio, the median ratio, and the rounds where gpucarve's p99 was
    at most kube-scheduler's."""
    out: dict[str, Any] = {}
    ratios = []
    for k, results in enumerate(rounds, 1):
        ratio = _p99_ratio(results)
        ratios.append(ratio)
        ours = results["gpucarve"]["p99 creation→bound s"]
        theirs = results["kube-scheduler"]["p99 creation→bound s"]
        out[f"round {k} p99 s gpucarve, kube-scheduler, ratio"] = f"{ours}, {theirs}, {ratio}"
    out["median p99 ratio gpucarve/kube-scheduler"] = statistics.median(ratios)
    out["rounds with gpucarve's p99 at most kube-scheduler's"] = (
        f"{sum(r <= 1 for r in ratios)} of {len(ratios)}"
    )
    return out


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _cycles(port: int) -> dict[str, float]:
    """The scheduler's cycles while it bound, from its own metrics
    (`gpucarve_cycle_duration_seconds`, the engine's part of each cycle): how many, and their
    mean length."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    found = {
        s.name: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("gpucarve_cycle_duration_seconds_")
    }
    count = found.get("gpucarve_cycle_duration_seconds_count", 0.0)
    total = found.get("gpucarve_cycle_duration_seconds_sum", 0.0)
    return {"cycles": count, "mean engine ms a cycle": round(1000 * total / max(count, 1), 1)}


def _validate(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse flags that do not go together, naming the fix."""
    if args.workload == "mix" and args.scheduler != "gpucarve":
        ap.error(
            "--workload mix has gangs, which kube-scheduler cannot place: use --scheduler gpucarve"
        )
    if args.scheduler == "plumbing" and args.workload != "whole":
        ap.error("--scheduler plumbing binds whole-GPU pods only: use --workload whole")
    if args.profile is not None:
        if args.scheduler in ("kube-scheduler", "plumbing"):
            ap.error("--profile samples gpucarve's scheduler: use --scheduler gpucarve or both")
        if not args.profile.parent.is_dir():
            ap.error(f"--profile {args.profile}: folder {args.profile.parent} does not exist")
    if args.rounds > 1 and args.scheduler != "both":
        ap.error("--rounds compares the two schedulers: use --scheduler both")
    if args.rounds > 1 and args.profile is not None:
        ap.error("--profile samples one run: use --rounds 1")
    for flag in ("nodes", "pods", "creators", "workers", "rounds"):
        if getattr(args, flag) < 1:
            ap.error(f"--{flag} must be at least 1")
    if args.rate is not None and not 0 < args.rate <= 100_000:
        ap.error(f"--rate must be above 0 and at most 100000 pods/s, got {args.rate:g}")
    per_node = {"mig": 56, "dra-mig": 8 * 8 * len(DRA_MIG_PROFILES) // sum(
        DRA_MIG_SLICES[p] for p in DRA_MIG_PROFILES)}  # fmt: skip
    capacity = args.nodes * per_node.get(args.workload, 8)
    if args.pods > capacity:
        ap.error(f"--pods {args.pods} exceeds the {capacity} devices of --nodes {args.nodes}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--pods", type=int, default=5000)
    ap.add_argument(
        "--scheduler", choices=("gpucarve", "kube-scheduler", "both", "plumbing"), default="both"
    )
    ap.add_argument("--workload", choices=WORKLOADS, default="whole")
    ap.add_argument("--creators", type=int, default=4, help="creating processes")
    ap.add_argument("--workers", type=int, default=8, help="threads per creating process")
    ap.add_argument(
        "--rate", type=float, metavar="PODS_PER_S",
        help="create the pods at this pace (default: as fast as the API server takes them)",
    )  # fmt: skip
    ap.add_argument("--kwok", action="store_true", help="run kwok's fake kubelets too")
    ap.add_argument(
        "--rounds", type=int, default=1,
        help="with --scheduler both: run the two this many times, alternating, and print each "
        "round's p99 and their ratio, and the median ratio",
    )  # fmt: skip
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--profile", type=Path, metavar="FILE",
        help="sample gpucarve's scheduler with py-spy into FILE and print where its time went",
    )  # fmt: skip
    args = ap.parse_args()
    _validate(ap, args)
    bin_dir = find_binaries()
    names = ["gpucarve", "kube-scheduler"] if args.scheduler == "both" else [args.scheduler]
    figures: dict[str, Any] = {
        "nodes": args.nodes,
        "pods": args.pods,
        "workload": args.workload,
        "kubelets": "kwok" if args.kwok else "none",
        "creation": f"paced at {args.rate:g} pods/s" if args.rate else "as fast as possible",
    }
    # one round after the other, the schedulers alternating within each: this machine's speed
    # drifts, and kube-scheduler's own p99 moves several-fold between runs of one binary
    rounds = [{name: run_one(args, name, bin_dir) for name in names} for _ in range(args.rounds)]
    results = rounds[0]
    for name, res in results.items():
        figures.update({f"{name} {k}": v for k, v in res.items()})
    if len(results) == 2:
        ours, theirs = results["gpucarve"], results["kube-scheduler"]
        figures["pods/s ratio gpucarve/kube-scheduler"] = round(
            ours["pods/s"] / theirs["pods/s"], 2
        )
        figures["p99 ratio gpucarve/kube-scheduler"] = _p99_ratio(results)
    if len(rounds) > 1:
        figures.update(_rounds(rounds))
    print_figures(figures, args.json)
    if args.profile is not None and "gpucarve" in results:
        profile_sched.report(args.profile)


if __name__ == "__main__":
    main()
