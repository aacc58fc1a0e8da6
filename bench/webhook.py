"""Admission reviews per second and latency of `gpucarve webhook serve` on this machine.

    python bench/webhook.py [--rate 200] [--seconds 10] [--clients 8] [--json]

Starts the webhook as its own process over TLS (a fresh certificate) with the built-in
three-team policy, then sends AdmissionReview v1 requests for GPU pods — alternately to
/mutate and /validate, half of them pods the webhook denies — from `--clients` keep-alive
connections, paced to `--rate` reviews per second in all; then once more as fast as they go.
Prints the paced p50/p99/max latency and the unpaced reviews/s. Target: p99 <= 10 ms at
200 reviews/s (the API server's own webhook budget is timeoutSeconds, default 10 s).

Then `--large` (default 40) reviews of a pod near the API server's 3 MiB body limit (hundreds
of containers with long environments) arrive at once while a prober asks /healthz every 0.1 s:
prints how long they took and the slowest /healthz answer. Target: /healthz within 1 s
throughout (the kubelet's probe and the API server's webhook timeout are seconds).
"""

from __future__ import annotations

import argparse
import http.client
import json
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from figures import print_figures

from gpucarve.config.examples import POLICY, example_path
from gpucarve.devcluster.procs import free_port
from gpucarve.webhook.certs import issue


def _review(i: int) -> bytes:
    labels = {"app": "bench"}
    if i % 2:
        labels["gpucarve.io/queue"] = "production"  # another team's queue: denied
    pod = {
        "metadata": {"name": f"p{i}", "namespace": "research", "labels": labels},
        "spec": {"containers": [{"name": "main", "image": "x",
                                 "resources": {"limits": {"nvidia.com/gpu": "8"}}}]},
    }  # fmt: skip
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": f"u{i}", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                    "operation": "CREATE", "namespace": "research", "object": pod},
    }  # fmt: skip
    return json.dumps(review).encode()


def _large_review(i: int) -> bytes:
    env = [{"name": f"VAR_{k}", "value": "v" * 200} for k in range(40)]
    containers = [
        {"name": f"c{j}", "image": "x", "env": env,
         "resources": {"limits": {"nvidia.com/gpu": "1"} if j == 0 else {"cpu": "1"}}}
        for j in range(250)
    ]  # fmt: skip
    pod = {"metadata": {"name": f"big{i}", "namespace": "research"},
           "spec": {"containers": containers}}  # fmt: skip
    request = {"uid": f"big{i}", "kind": {"group": "", "version": "v1", "kind": "Pod"},
               "operation": "CREATE", "namespace": "research", "object": pod}  # fmt: skip
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    return json.dumps(review).encode()


def _large(port: int, ca: Path, count: int) -> tuple[float, float, int, int]:
    """`count` large reviews at once (half /mutate, half /validate) while /healthz is probed:
    (seconds for all, slowest /healthz in seconds, bytes per review, how many were answered
    as past the review deadline)."""
    ctx = ssl.create_default_context(cafile=str(ca))
    body = _large_review(0)
    done = threading.Event()
    health: list[float] = []
    overrun: list[int] = []

    def probe() -> None:
        while not done.is_set():
            conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=30)
            t = time.perf_counter()
            conn.request("GET", "/healthz")
            conn.getresponse().read()
            health.append(time.perf_counter() - t)
            conn.close()
            time.sleep(0.1)

    def one(i: int) -> None:
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=600)
        conn.request("POST", "/mutate" if i % 2 else "/validate", _large_review(i),
                     {"Content-Type": "application/json"})  # fmt: skip
        reply = conn.getresponse()
        said = reply.read()
        assert reply.status == 200, reply.status
        if b"did not decide" in said:
            overrun.append(i)
        conn.close()

    prober = threading.Thread(target=probe)
    prober.start()
    t0 = time.perf_counter()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.perf_counter() - t0
    done.set()
    prober.join()
    return took, max(health), len(body), len(overrun)


def _client(port: int, ca: Path, n: int, interval: float, out: list[float]) -> None:
    ctx = ssl.create_default_context(cafile=str(ca))
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
    start = time.perf_counter()
    for i in range(n):
        if interval:
            delay = start + i * interval - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
        path = "/mutate" if i % 4 < 2 else "/validate"
        t = time.perf_counter()
        conn.request("POST", path, _review(i), {"Content-Type": "application/json"})
        reply = conn.getresponse()
        reply.read()
        assert reply.status == 200, reply.status
        out.append(time.perf_counter() - t)
    conn.close()


def _run(port: int, ca: Path, clients: int, total: int, rate: float) -> tuple[list[float], float]:
    per = total // clients
    interval = clients / rate if rate else 0.0
    lat: list[list[float]] = [[] for _ in range(clients)]
    threads = [threading.Thread(target=_client, args=(port, ca, per, interval, lat[k]))
               for k in range(clients)]  # fmt: skip
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sorted(x for xs in lat for x in xs), time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=float, default=200)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--large", type=int, default=40)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gpucarve-webhook-"))
    issue(["localhost"], ["127.0.0.1"], datetime.now(UTC)).write(work)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpucarve", "webhook", "serve", "--policy",
         str(example_path(POLICY)), "--cert-dir", str(work), "--host", "127.0.0.1",
         "--port", str(port)],
        stdout=(work / "webhook.log").open("wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                _client(port, work / "ca.crt", 1, 0, [])  # in this thread: errors reach here
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit((work / "webhook.log").read_text()) from None
                time.sleep(0.2)
        _run(port, work / "ca.crt", args.clients, 400, 0)  # warm-up
        paced, _ = _run(port, work / "ca.crt", args.clients,
                        int(args.rate * args.seconds), args.rate)  # fmt: skip
        flat, elapsed = _run(port, work / "ca.crt", args.clients, 4000, 0)
        large = _large(port, work / "ca.crt", args.large) if args.large else None
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)

    def ms(q: float) -> float:
        return round(paced[min(len(paced) - 1, int(q * len(paced)))] * 1000, 2)

    figures: dict[str, object] = {}
    if large is not None:
        took, slowest, size, late = large
        figures[f"{args.large} large reviews ({size / 2**20:.1f} MiB each) at once, s"] = round(
            took, 2
        )
        figures["slowest /healthz meanwhile, ms"] = round(slowest * 1000, 1)
        figures["of them past the review deadline"] = late
    print_figures(
        {
            **figures,
            f"p50 ms at {args.rate:.0f}/s": ms(0.5),
            f"p99 ms at {args.rate:.0f}/s": ms(0.99),
            f"max ms at {args.rate:.0f}/s": round(paced[-1] * 1000, 2),
            "reviews/s unpaced": round(len(flat) / elapsed, 1),
            "target": "p99 <= 10 ms at 200 reviews/s",
        },
        args.json,
    )


if __name__ == "__main__":
    main()
