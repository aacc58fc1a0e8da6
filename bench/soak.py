"""A soak of the gpucarve scheduler on a real kube-apiserver, with churn; not run in CI.

    python bench/soak.py [--minutes 30] [--nodes 100] [--rate 10] [--lifetime-s 60]
                         [--report-s 60] [--seed 1] [--json]

etcd and kube-apiserver start on loopback (tools/testenv.sh builds them), `--nodes` 8-GPU H100
nodes are created Ready (a tenth more are kept in reserve), and the scheduler runs as its own
process with leader election and policy reload on, as the Helm chart runs it. Then, each second,
from one seeded generator:

- `--rate` pods a second on average arrive in two queues' namespaces, one in eight of them a
  gang of four two-GPU pods (all or nothing); a bound pod runs for a random time (mean
  `--lifetime-s`) and is deleted, a gang all at once; a pod pending for two minutes is given up;
- every 20 s a node event: a node cordoned, one uncordoned, one added from the reserve, or one
  drained (its pods and their gangs deleted, as a failed job is) and removed;
- every 90 s the two queues' quotas are edited in the policy file (a 50/50 split, then 70/30,
  and back), which the running scheduler reloads.

Every `--report-s` the churn pauses for a few seconds and everything is read back and checked
(`tests/integration/invariants.py`: no slice assigned twice, no node's allocatable exceeded, every
gang whole or not at all, no pod lost, each pending pod with the scheduler's reason), with the
scheduler's RSS. Exits 1 if any check failed or the scheduler stopped.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' invariants
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bind_load import h100_pool, rss_mib
from soak_churn import Churn
from tests.integration.invariants import violations

from gpucarve.config.policy_build import load_policy
from gpucarve.devcluster.nodes import node_manifests
from gpucarve.devcluster.stack import LocalStack, find_binaries
from gpucarve.kube.api.client import Client

POLICY = """
apiVersion: gpucarve.io/v1alpha1
kind: Policy
metadata: {{name: soak}}
pools:
{pool}cohorts:
  - name: all
queues:
  - name: alpha
    namespaces: [alpha]
    cohort: all
    quota:
      h100-full: {{nominal: {alpha}, borrowingLimit: {total}}}
  - name: beta
    namespaces: [beta]
    cohort: all
    quota:
      h100-full: {{nominal: {beta}, borrowingLimit: {total}}}
"""
SPLITS = (0.5, 0.7, 0.5, 0.3)


def policy_text(nodes: int, split: float) -> str:
    total = nodes * 8
    alpha = int(total * split)
    return POLICY.format(pool=h100_pool(nodes), alpha=alpha, beta=total - alpha, total=total)


def write_policy(path: Path, nodes: int, split: float) -> None:
    """Atomically, as the kubelet swaps a ConfigMap's files: the scheduler never reads half."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(policy_text(nodes, split))
    tmp.replace(path)


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--rate", type=float, default=10.0, help="pods arriving per second")
    ap.add_argument("--lifetime-s", type=float, default=60.0, help="mean run time of a pod")
    ap.add_argument("--report-s", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="one JSON object per report")
    args = ap.parse_args()
    for flag in ("minutes", "nodes", "rate", "lifetime_s", "report_s"):
        if getattr(args, flag) <= 0:
            ap.error(f"--{flag.replace('_', '-')} must be above 0, got {getattr(args, flag)}")
    return args


@contextmanager
def scheduler(policy: Path, kubeconfig: Path, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpucarve", "scheduler", "--policy", str(policy),
         "--kubeconfig", str(kubeconfig), "--identity", "soak"],
        stdout=log.open("wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def check(client: Client, churn: Churn, sched: subprocess.Popen[bytes], t: float) -> dict[str, Any]:
    pods = [p for ns in churn.namespaces for p in churn.list_pods(ns)]
    nodes = client.get("/api/v1/nodes")["items"]
    counts, problems = violations(pods, nodes, churn.alive)
    rss, peak = rss_mib(sched.pid)
    return {
        "t_s": round(t),
        **counts,
        **churn.totals(),
        "rss_mib": rss,
        "peak_rss_mib": peak,
        "violations": len(problems),
        "first_violations": problems[:5],
    }


def line(r: dict[str, Any]) -> str:
    return (
        f"t={r['t_s']:>5} s  pods {r['bound']:>5} bound {r['pending']:>4} pending | "
        f"created {r['created']:>6} deleted {r['deleted']:>6} | nodes {r['nodes']} "
        f"(cordoned {r['cordoned']}, added {r['added']}, removed {r['removed']}) | "
        f"policy edits {r['policy_edits']} | RSS {r['rss_mib']:.1f} MiB "
        f"(peak {r['peak_rss_mib']:.1f}) | violations {r['violations']}"
        + "".join(f"\n    {v}" for v in r["first_violations"])
    )


def main() -> None:
    args = parse_args()
    work = Path(tempfile.mkdtemp(prefix="gpucarve-soak-"))
    spare = max(1, args.nodes // 10)
    policy_file = work / "policy.yaml"
    write_policy(policy_file, args.nodes + spare, SPLITS[0])
    policy = load_policy(policy_file, []).policy
    assert policy is not None, "the soak's own policy is valid"
    manifests = node_manifests(policy)
    for n in manifests:
        n["status"]["conditions"] = [{"type": "Ready", "status": "True", "reason": "Soak"}]
    reports: list[dict[str, Any]] = []
    # the soak measures gpucarve's scheduler alone against the API server it churns
    off = {
        "kwok": "the soak's nodes are Ready as written; it churns them itself",
        "controllers": "the soak writes its pods itself",
        "kube-scheduler": "every pod of the soak is gpucarve's",
        "webhook": "the soak measures the scheduler; bench/webhook.py measures the webhook",
    }
    with LocalStack(find_binaries(), work / "kube", off=off) as stack:
        client = Client.from_kubeconfig(stack.kubeconfig())
        churn = Churn(client, random.Random(args.seed), manifests, args.nodes, args)
        churn.setup()
        with scheduler(policy_file, stack.kubeconfig(), work / "scheduler.log") as sched:
            started = time.monotonic()
            end = started + args.minutes * 60
            next_report = started + args.report_s
            next_edit = started + 90
            edits = 0
            while time.monotonic() < end and sched.poll() is None:
                tick = time.monotonic()
                churn.tick(tick - started)
                if tick >= next_edit:
                    edits += 1
                    write_policy(policy_file, args.nodes + spare, SPLITS[edits % len(SPLITS)])
                    churn.policy_edits = edits
                    next_edit += 90
                if tick >= next_report:
                    time.sleep(5)  # settle: bindings and reasons of the last arrivals land
                    reports.append(check(client, churn, sched, time.monotonic() - started))
                    print(json.dumps(reports[-1]) if args.json else line(reports[-1]), flush=True)
                    next_report += args.report_s
                time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
            stopped = sched.poll()
            final = None
            if stopped is None:
                time.sleep(5)  # settle, as before every check
                final = check(client, churn, sched, time.monotonic() - started)
    if final is not None:
        reports.append(final)
        print(json.dumps(final) if args.json else line(final), flush=True)
    summary(reports, stopped, work)


def summary(reports: list[dict[str, Any]], stopped: int | None, work: Path) -> None:
    broken = sum(r["violations"] for r in reports)
    if reports:
        first, last = reports[0], reports[-1]
        peak = max(r["peak_rss_mib"] for r in reports)
        print(
            f"summary: {len(reports)} checks, {broken} violations; scheduler RSS "
            f"{first['rss_mib']:.1f} MiB at {first['t_s']} s, {last['rss_mib']:.1f} MiB at "
            f"{last['t_s']} s, peak {peak:.1f} MiB; {last['created']} pods created, "
            f"{last['deleted']} deleted"
        )
    if stopped is not None:
        print(f"the scheduler stopped with exit code {stopped}; see {work / 'scheduler.log'}")
    sys.exit(1 if broken or stopped is not None else 0)


if __name__ == "__main__":
    main()
