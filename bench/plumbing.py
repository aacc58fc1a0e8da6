"""The floor under gpucarve's binding latency: its own client and pod informer and a pool of
binding threads, as the scheduler has them, binding each new pod of gpucarve's to the next
node in turn with no decision at all (no view, no engine, no capacity looked at). Started by
`bench/bind.py --scheduler plumbing`; not a scheduler.

    python bench/plumbing.py KUBECONFIG
"""

from __future__ import annotations

import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from gpucarve.kube.api.auth import ConfigProblem
from gpucarve.kube.api.client import ApiError, Client
from gpucarve.kube.api.informer import Informer

WORKERS = 8  # the scheduler's default binding threads


def _bind(client: Client, pod: dict[str, Any], node: str) -> None:
    meta = pod["metadata"]
    ns, name = meta["namespace"], meta["name"]
    body = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name, "namespace": ns},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    client.call("POST", f"/api/v1/namespaces/{ns}/pods/{name}/binding", body)


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    try:
        client = Client.from_kubeconfig(sys.argv[1])
        nodes = [n["metadata"]["name"] for n in client.get("/api/v1/nodes")["items"]]
    except (ConfigProblem, ApiError) as err:
        sys.exit(f"plumbing: {err}")
    if not nodes:
        sys.exit("no nodes to bind to")
    wake = threading.Event()
    pods = Informer(client, "/api/v1/pods", wake.set).start()
    pods.wait_synced(60)
    pool = ThreadPoolExecutor(WORKERS)
    sent: set[str] = set()
    generation, turn = 0, 0
    while True:
        wake.wait()
        wake.clear()
        generation, changed, every = pods.changes_since(generation)
        for pod in every if changed is None else [p for p in changed.values() if p]:
            spec = pod.get("spec") or {}
            key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
            if spec.get("nodeName") or spec.get("schedulerName") != "gpucarve" or key in sent:
                continue
            sent.add(key)
            pool.submit(_bind, client, pod, nodes[turn % len(nodes)])
            turn += 1


if __name__ == "__main__":
    main()
