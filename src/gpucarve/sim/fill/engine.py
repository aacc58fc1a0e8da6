"""The fill experiment through the engine's own placement path: the figure `bench fill` prints
for gpucarve is what `gpucarve scheduler` and `gpucarve simulate` would do with the same pods.

The trace's cluster becomes a policy as `gpucarve import alibaba` writes one: a time-slicing
pool per node shape, labelled with its model, here with 100 replicas per GPU, so that every
share of the trace (multiples of 10 milli) is exact. Nodes keep the trace's names, order, CPU
and memory. A pod becomes a workload as the importer makes one: a share asks for its fraction,
a k-GPU pod is a gang of k pods of one whole GPU each on one node (its CPU and memory split
evenly: the trace's k-GPU pods all divide), a model list is a required affinity on the model
label. The scoring profile is the fragmentation model alone.

Each pod is then placed as the engine's cycle would place it, without queues or quota (the
experiment has none): the demand is the running pods and this one, as a cycle's would be (the
experiment's pods never end), its candidate flavors ranked
by the model, and the gang placed by the engine's placer (`engine.OneByOne`). Pods that
do not fit are dropped, as the experiment says.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from gpucarve.config.catalog_file import catalog_with, packaged_catalog
from gpucarve.config.policy_build import build_policy
from gpucarve.core.cluster import ClusterState, Node, Slice, pool_node
from gpucarve.core.policy import Policy, ScoringWeights
from gpucarve.core.problems import InvalidInput, Problem
from gpucarve.core.snapshot import Snapshot
from gpucarve.core.vocabulary import API_VERSION
from gpucarve.core.workload import (
    GpuKind,
    GpuRequest,
    LabelRequirement,
    Operator,
    PodSet,
    TopologyMode,
    Workload,
)
from gpucarve.engine import OneByOne
from gpucarve.sim.fill.marks import FillRun, Marks
from gpucarve.sim.fill.trace import Nodes, Pods, arrival_order
from gpucarve.sim.traces.alibaba import MODEL_LABEL, model_ids, shape_pool

REPLICAS = 100  # per GPU: the trace's shares are multiples of 10 milli
QUEUE = "fill"
WEIGHTS = ScoringWeights.of({"fragmentation": 1})


@dataclass
class FillEngine:
    policy: Policy
    cluster: ClusterState

    def placer(self) -> OneByOne:
        """The engine's placer on this cluster, empty, scored by fragmentation alone."""
        return OneByOne(Snapshot(self.policy, self.cluster), WEIGHTS)


def build(nodes: Nodes) -> FillEngine:
    """The trace's cluster as a policy and its cluster state (nodes in the trace's order)."""
    codes = {m for m, g in zip(nodes.model, nodes.gpus, strict=True) if g}
    ids, extra, problems = model_ids(codes, packaged_catalog(), {})
    if problems:
        raise InvalidInput(
            "the node list",
            [
                Problem(
                    ("model",),
                    "unknown-model",
                    p.message,
                    "use the trace's model codes (A10, G2, G3, P100, T4, V100M16, V100M32) or "
                    "--policy gpucarve-array, which needs no catalog model",
                )
                for p in problems
            ],
        )
    catalog = catalog_with(extra, "the fill experiment's models") if extra else packaged_catalog()
    shapes = Counter(
        (nodes.model[k], int(nodes.gpus[k]), int(nodes.cpu[k]), int(nodes.mem[k]))
        for k in range(len(nodes.names))
        if nodes.gpus[k]
    )
    pools: list[dict[str, Any]] = []
    pool_of: dict[tuple[str, int, int, int], str] = {}
    quota: Counter[str] = Counter()
    for shape, count in sorted(shapes.items()):
        code, gpus, cpu, mem = shape
        name = f"{code.lower()}-{gpus}g-{cpu}m-{mem}mi"
        pool_of[shape] = name
        prefix = f"fill-{code.lower()}"
        pools.append(shape_pool(name, ids[code], count, shape, REPLICAS, prefix))
        quota[f"{prefix}-shared"] += count * gpus * REPLICAS
    doc = {
        "apiVersion": API_VERSION,
        "kind": "Policy",
        "metadata": {"name": "fill"},
        "pools": pools,
        "queues": [
            {
                "name": QUEUE,
                "namespaces": [QUEUE],
                "quota": {f: {"nominal": q} for f, q in sorted(quota.items())},
            }
        ],
        "scheduling": {"scoring": {"binpack": 0, "spread": 0, "fragmentation": 1}},
    }
    policy = build_policy(doc, catalog, "the fill experiment's policy").policy
    by_name = {p.name: p for p in policy.pools}
    out_nodes: list[Node] = []
    slices: dict[str, Slice] = {}
    seen: Counter[str] = Counter()
    for k, name in enumerate(nodes.names):
        if not nodes.gpus[k]:
            continue  # the GPU node list has none; CPU-only nodes are not in the experiment
        shape = (nodes.model[k], int(nodes.gpus[k]), int(nodes.cpu[k]), int(nodes.mem[k]))
        pool = by_name[pool_of[shape]]
        node, node_slices = pool_node(
            policy, pool, name, seen[pool.name], cpu_milli=shape[2], memory_mib=shape[3]
        )
        seen[pool.name] += 1
        out_nodes.append(node)
        for s in node_slices:
            slices[s.id] = s
    return FillEngine(policy, ClusterState(tuple(out_nodes), MappingProxyType(slices)))


def workload(pods: Pods, i: int, serial: int) -> Workload:
    n, m = int(pods.num_gpu[i]), int(pods.gpu_milli[i])
    parts = max(1, n)
    affinity: tuple[tuple[LabelRequirement, ...], ...] = ()
    if pods.spec[i]:
        affinity = ((LabelRequirement(MODEL_LABEL, Operator.IN, tuple(sorted(pods.spec[i]))),),)
    gpu = GpuRequest(GpuKind.FRACTION, milli=m if n else 0) if n else GpuRequest()
    ps = PodSet(
        "pod",
        parts,
        parts,
        gpu,
        int(pods.cpu[i]) // parts,
        int(pods.mem[i]) // parts,
        affinity=affinity,
    )
    return Workload(
        id=f"{QUEUE}/{pods.names[i]}-{serial}",
        queue=QUEUE,
        priority_class="",
        priority=0,
        preemptible=False,
        pod_sets=(ps,),
        topology=TopologyMode.NODE if n > 1 else TopologyMode.NONE,
    )


def run_fill_engine(
    nodes: Nodes, pods: Pods, seed: int, engine: FillEngine | None = None
) -> FillRun:
    """`run_fill`'s figures for gpucarve, through the engine."""
    engine = engine or build(nodes)
    placer = engine.placer()
    marks = Marks(pods, nodes.gpu_capacity)
    for serial, i in enumerate(arrival_order(pods, nodes.gpu_capacity, seed)):
        marks.arrive(i)
        if placer.place(workload(pods, i, serial)) is not None:
            marks.placed(i)
        else:
            marks.drop(i)
    return marks.run("gpucarve", seed)


def placements(nodes: Nodes, pods: Pods, seed: int, limit: int) -> list[tuple[int, str | None]]:
    """(pod, node name or None) for the first `limit` arrivals: what the equivalence test
    compares with the array model."""
    placer = build(nodes).placer()
    out: list[tuple[int, str | None]] = []
    for serial, i in enumerate(arrival_order(pods, nodes.gpu_capacity, seed)[:limit]):
        got = placer.place(workload(pods, i, serial))
        out.append((i, got[0] if got else None))
    return out
