"""Import the Alibaba GPU-sharing trace (cluster-trace-gpu-v2023) for `gpucarve simulate`.

The trace is a node list and a pod list (columns in docs/simulator.md). It becomes three
documents a user can read, edit and replay:

- a policy: one time-slicing pool per node shape (model, GPUs, CPU, memory), because every
  node of the trace hosts both fractional and whole-GPU pods; `replicas` sets the granularity
  (10: a pod's `gpu_milli` is rounded up to a tenth of a GPU). One queue owns all of it; the
  trace's QoS classes become priority classes (LS and Guaranteed: not preemptible, Burstable,
  BE: preemptible), since the trace names no teams;
- a catalog extension for the trace's models gpucarve does not know (P100, and the anonymised
  G2 / G3, whose assumed specs the file says; `--model-map G2=<catalog model>` replaces them);
- a workload trace in gpucarve's JSONL format: a fractional pod asks for `gpu_milli` as a
  fraction annotation; a k-GPU pod becomes a gang of k pods of one whole GPU each (fraction
  1000 takes every replica of one GPU) on one node, each with a k-th of its CPU and memory;
  `gpu_spec` becomes a required node affinity on the model label; submit time = creation
  time (from the first pod), duration = deletion time - scheduled time (creation time for
  pods the trace left pending).

Rows that cannot be used are errors naming their line, or skipped and counted when `lenient`.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

from gpucarve.core.catalog import Catalog, UnknownModel
from gpucarve.core.problems import InvalidInput, Problem
from gpucarve.core.vocabulary import API_VERSION, FRACTION_ANNOTATION, POOL_LABEL
from gpucarve.sim.traces.alibaba_csv import TraceNode, TracePod, read_nodes, read_pods

MODEL_LABEL = "alibaba.com/gpu-model"
NAMESPACE = "alibaba"
QUEUE = "alibaba"

# The trace's model codes that name a model of gpucarve's catalog.
KNOWN_MODELS = {"T4": "T4", "A10": "A10", "V100M16": "V100-16GB", "V100M32": "V100-32GB"}

# Models the catalog lacks, written to the catalog extension. P100 is a public spec; G2 and G3
# are anonymised by the trace, so their entries are assumptions and say so.
EXTRA_MODELS: dict[str, dict[str, Any]] = {
    "P100": {
        "id": "P100-16GB",
        "flavorPrefix": "p100",
        "architecture": "pascal",
        "computeCapability": "6.0",
        "memoryGB": 16,
        "memoryMiB": 16280,
        "smCount": 56,
        "source": "NVIDIA Tesla P100 16 GB datasheet",
    },
    "G2": {
        "id": "alibaba-G2",
        "flavorPrefix": "alibaba-g2",
        "architecture": "unknown",
        "computeCapability": "7.0",
        "memoryGB": 32,
        "memoryMiB": 32510,
        "memoryEstimated": True,
        "smCount": 80,
        "source": "anonymised in the Alibaba trace: specs ASSUMED (V100-32GB-like); "
        "use --model-map G2=<model> to choose",
    },
    "G3": {
        "id": "alibaba-G3",
        "flavorPrefix": "alibaba-g3",
        "architecture": "unknown",
        "computeCapability": "8.0",
        "memoryGB": 40,
        "memoryMiB": 40537,
        "memoryEstimated": True,
        "smCount": 108,
        "source": "anonymised in the Alibaba trace: specs ASSUMED (A100-40GB-like); "
        "use --model-map G3=<model> to choose",
    },
}

QOS_PRIORITY = {
    "LS": "latency-sensitive",
    "Guaranteed": "latency-sensitive",
    "Burstable": "burstable",
}
QOS_DEFAULT = "best-effort"
PRIORITY_CLASSES = [
    {
        "name": "latency-sensitive",
        "value": 1000,
        "preemptible": False,
        "description": "Trace QoS LS and Guaranteed.",
    },
    {
        "name": "burstable",
        "value": 500,
        "preemptible": True,
        "description": "Trace QoS Burstable.",
    },
    {
        "name": "best-effort",
        "value": 0,
        "preemptible": True,
        "default": True,
        "description": "Trace QoS BE (and rows with no QoS).",
    },
]


@dataclass
class Imported:
    policy: dict[str, Any]
    catalog: dict[str, Any] | None
    workloads: Sequence[dict[str, Any]]
    skipped_nodes: int = 0
    skipped_pods: int = 0
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def model_ids(
    codes: set[str], catalog: Catalog, model_map: dict[str, str]
) -> tuple[dict[str, str], list[dict[str, Any]], list[Problem]]:
    """Catalog model per trace code, the catalog entries to write, and problems."""
    ids: dict[str, str] = {}
    extra: list[dict[str, Any]] = []
    problems: list[Problem] = []
    for code in sorted(codes):
        wanted = model_map.get(code) or KNOWN_MODELS.get(code)
        if wanted is not None:
            try:
                ids[code] = catalog.lookup(wanted).id
            except UnknownModel as exc:
                problems.append(
                    Problem(
                        ("--model-map", code),
                        "unknown-model",
                        str(exc),
                        "name a model from `gpucarve catalog list`",
                    )
                )
            continue
        if code in EXTRA_MODELS:
            entry = EXTRA_MODELS[code]
            ids[code] = str(entry["id"])
            extra.append(entry)
            continue
        problems.append(
            Problem(
                ("model",),
                "unknown-model",
                f"the trace's GPU model {code!r} is not one gpucarve knows",
                f"pass --model-map {code}=<model from `gpucarve catalog list`>",
            )
        )
    return ids, extra, problems


def shape_pool(
    name: str,
    model_id: str,
    count: int,
    shape: tuple[str, int, int, int],
    replicas: int,
    prefix: str,
) -> dict[str, Any]:
    """The policy's pool for the trace's nodes of one shape (model code, GPUs, milli-CPU,
    MiB): time-slicing, labelled with the model code."""
    code, gpus, cpu, mem = shape
    return {
        "name": name,
        "gpuModel": model_id,
        "nodes": count,
        "gpusPerNode": gpus,
        "cpusPerNode": max(1, cpu // 1000),
        "memoryGiBPerNode": max(1, mem // 1024),
        "sharing": "time-slicing",
        "replicas": replicas,
        "flavorPrefix": prefix,
        "nodeLabels": {MODEL_LABEL: code},
    }


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")


def import_trace(
    nodes_path: str | Path,
    pods_path: str | Path,
    catalog: Catalog,
    replicas: int = 10,
    model_map: dict[str, str] | None = None,
    lenient: bool = False,
) -> Imported:
    nodes, node_rows = read_nodes(nodes_path, lenient)
    pods, pod_rows = read_pods(pods_path, lenient)
    if not nodes:
        raise InvalidInput(
            str(nodes_path),
            [Problem((), "no-gpu-nodes", "no GPU node in the node list", "pass the GPU node list")],
        )
    if not pods:
        skipped = f" ({pod_rows.skipped} rows skipped)" if pod_rows.skipped else ""
        raise InvalidInput(
            str(pods_path),
            [
                Problem(
                    (),
                    "no-pods",
                    f"no pod in the pod list{skipped}: there is nothing to replay",
                    "pass the trace's pod list (openb_pod_list_*.csv)",
                )
            ],
        )
    ids, extra, problems = model_ids({n.model for n in nodes}, catalog, model_map or {})
    if problems:
        raise InvalidInput(str(nodes_path), problems)
    shapes = Counter((n.model, n.gpus, n.cpu_milli, n.memory_mib) for n in nodes)
    pools: list[dict[str, Any]] = []
    largest: dict[str, tuple[int, int, int]] = {}  # model -> most GPUs, CPU, memory of a node
    per_flavor: Counter[str] = Counter()
    for (code, gpus, cpu, mem), count in sorted(shapes.items()):
        pool_name = _slug(f"{code}-{gpus}g-{cpu // 1000}c-{mem // 1024}gi")
        prefix = f"ali-{_slug(code)}"
        pool = shape_pool(pool_name, ids[code], count, (code, gpus, cpu, mem), replicas, prefix)
        pool["nodeLabels"][POOL_LABEL] = pool_name
        pools.append(pool)
        per_flavor[f"{prefix}-shared"] += count * gpus * replicas
        best = largest.get(code, (0, 0, 0))
        largest[code] = max(best, (gpus, cpu, mem))
    policy: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": "Policy",
        "metadata": {
            "name": "alibaba-trace",
            "description": "Imported from the Alibaba GPU-sharing trace (gpucarve import alibaba).",
        },
        "pools": pools,
        "queues": [
            {
                "name": QUEUE,
                "namespaces": [NAMESPACE],
                "quota": {f: {"nominal": q} for f, q in sorted(per_flavor.items())},
                "priorityClasses": [p["name"] for p in PRIORITY_CLASSES],
            }
        ],
        "priorityClasses": PRIORITY_CLASSES,
    }
    t0 = min((p.creation for p in pods), default=0)
    out = Imported(policy, None, TraceWorkloads(pods, t0))
    if extra:
        out.catalog = {
            "apiVersion": API_VERSION,
            "kind": "GpuCatalog",
            "models": extra,
        }
        for code, entry in EXTRA_MODELS.items():
            if entry in extra and entry.get("memoryEstimated"):
                out.notes.append(f"model {code}: {entry['source']}")
    unplaceable = sum(1 for p in pods if p.num_gpu and not _fits_somewhere(p, nodes))
    if unplaceable:
        out.notes.append(f"{unplaceable} pod(s) fit no node of the list; they will stay pending")
    out.skipped_nodes, out.skipped_pods = node_rows.skipped, pod_rows.skipped
    out.problems = node_rows.problems + pod_rows.problems
    return out


class TraceWorkloads(Sequence[dict[str, Any]]):
    """The trace's pods as gpucarve workloads, each made when it is read (written out one at
    a time, a large trace's documents are never all held at once)."""

    def __init__(self, pods: list[TracePod], t0: int) -> None:
        self._pods, self._t0 = pods, t0

    def __len__(self) -> int:
        return len(self._pods)

    @overload
    def __getitem__(self, i: int) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, i: slice) -> list[dict[str, Any]]: ...
    def __getitem__(self, i: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(i, slice):
            return [_workload(p, self._t0) for p in self._pods[i]]
        return _workload(self._pods[i], self._t0)


def _fits_somewhere(p: TracePod, nodes: list[TraceNode]) -> bool:
    return any(
        n.gpus >= p.num_gpu
        and n.cpu_milli >= p.cpu_milli
        and n.memory_mib >= p.memory_mib
        and (not p.gpu_spec or n.model in p.gpu_spec)
        for n in nodes
    )


def _workload(p: TracePod, t0: int) -> dict[str, Any]:
    # A k-GPU pod is k pods of one GPU: each takes a k-th of its CPU and memory (rounded up).
    parts = max(1, p.num_gpu)
    requests: dict[str, str] = {}
    if p.cpu_milli:
        requests["cpu"] = f"{-(-p.cpu_milli // parts)}m"
    if p.memory_mib:
        requests["memory"] = f"{-(-p.memory_mib // parts)}Mi"
    pod_set: dict[str, Any] = {"count": max(1, p.num_gpu), "resources": {"requests": requests}}
    if p.num_gpu:
        pod_set["annotations"] = {FRACTION_ANNOTATION: str(p.gpu_milli)}
    if p.gpu_spec:
        pod_set["affinity"] = [{"key": MODEL_LABEL, "operator": "In", "values": list(p.gpu_spec)}]
    doc: dict[str, Any] = {
        "name": p.name,
        "namespace": NAMESPACE,
        "priorityClass": QOS_PRIORITY.get(p.qos, QOS_DEFAULT),
        "submitTime": p.creation - t0,
        "duration": max(1, p.duration),
        "podSets": [pod_set],
    }
    if p.num_gpu > 1:
        doc["topology"] = "node"
    return doc
