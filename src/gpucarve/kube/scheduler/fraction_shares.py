"""Bursting fractions on the API server: each pod whose fraction has a limit above its request
carries its share of its GPU now (`gpucarve.io/gpu-share`: request, limit, and what its
neighbours' requests leave it, `core.fraction_share`), rewritten as neighbours come and go.

Admission and charge read only requests, so a neighbour is placed beside a bursting fraction
whenever the requests fit; the share says what the burst shrinks to. What enforces it is the
sharing layer's cap, set at the limit when the container starts (`device_config`): MPS and
HAMi-core cannot lower a running client's cap, so the share is the scheduler's account, read
by explain, the dashboard and whatever limiter re-reads it, not a cap pushed into the running
container.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from gpucarve.core.cluster import gpu_of_slice
from gpucarve.core.fraction_share import Ask, allowed
from gpucarve.core.policy import Policy
from gpucarve.core.vocabulary import GPU_SHARE_ANNOTATION
from gpucarve.core.workload import GpuKind, GpuRequest, PodAssignment, Workload
from gpucarve.engine.decisions import CycleResult
from gpucarve.kube.api.client import Client
from gpucarve.kube.scheduler.pod_marks import mark_pod
from gpucarve.kube.view.cluster_view import View

Gpu = tuple[str, int]  # node, GPU index
Held = tuple[str, GpuRequest, int]  # kube pod, what it asked, its GPU's memory (MiB)


def _fractions(
    policy: Policy, w: Workload, pods: tuple[PodAssignment, ...], pod_key: Callable[[str], str]
) -> Iterator[tuple[Gpu, Held]]:
    sets = {ps.name: ps.gpu for ps in w.pod_sets}
    for p in pods:
        gpu = sets.get(p.pod_set)
        if gpu is None or gpu.kind is not GpuKind.FRACTION or not p.slice_ids:
            continue
        index = gpu_of_slice(p.slice_ids[0])
        flavor = policy.flavors.get(p.flavor) if p.flavor else None
        if index is None or flavor is None:
            continue
        # the GPU's memory (its replicas' shares are rounded down)
        memory = next(
            (x.model.memory_mib for x in policy.pools if x.model.id == flavor.model_id),
            flavor.memory_mib * flavor.replicas,
        )
        yield (p.node, index), (pod_key(p.pod), gpu, memory)


def on_gpus(policy: Policy, view: View, result: CycleResult) -> dict[Gpu, list[Held]]:
    """Every fraction on a GPU that holds a bursting one, running or admitted this cycle."""
    by_gpu: defaultdict[Gpu, list[Held]] = defaultdict(list)
    admitted = {a.workload for a in result.admissions}
    for rw in view.snapshot.running:
        if rw.workload.id in admitted:
            continue  # an elastic gang growing: its pods come with the admission
        for gpu, held in _fractions(policy, rw.workload, rw.pods, lambda pod: pod):
            by_gpu[gpu].append(held)
    pending = {w.id: w for w in view.snapshot.pending}
    for a in result.admissions:
        w = pending.get(a.workload)
        if w is None or a.after_evictions:
            continue
        key = lambda pod, wid=a.workload: view.pod_of(wid, pod)  # noqa: E731
        for gpu, held in _fractions(policy, w, a.pods, key):
            by_gpu[gpu].append(held)
    return {g: h for g, h in by_gpu.items() if any(_bursts(x[1]) for x in h)}


def _bursts(gpu: GpuRequest) -> bool:
    return bool(gpu.milli_limit or gpu.memory_limit_mib)


def shares(gpus: Mapping[Gpu, list[Held]]) -> dict[str, str]:
    """Bursting pod -> its `gpu-share` annotation's value."""
    out: dict[str, str] = {}
    for (node, index), held in sorted(gpus.items()):
        compute = allowed(
            [Ask(p, g.milli, g.milli_limit or g.milli) for p, g, _ in held if g.milli], 1000
        )
        memory_asks = [Ask(p, g.memory_mib, g.memory_limit_mib or g.memory_mib)
                       for p, g, _ in held if g.memory_mib]  # fmt: skip
        memory = allowed(memory_asks, held[0][2])
        for pod, g, _ in held:
            if not _bursts(g):
                continue
            doc: dict[str, Any] = {"gpu": f"{node}/gpu{index}"}
            if g.milli:
                doc["fraction"] = {
                    "request": g.milli, "limit": g.milli_limit or g.milli, "now": compute[pod]
                }  # fmt: skip
            if g.memory_mib:
                doc["memoryMiB"] = {
                    "request": g.memory_mib,
                    "limit": g.memory_limit_mib or g.memory_mib,
                    "now": memory[pod],
                }
            out[pod] = json.dumps(doc, separators=(",", ":"), sort_keys=True)
    return out


class ShareMarks:
    """Writes each bursting pod's share where it changed (read from the informer's copy)."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def write(self, values: Mapping[str, str], pod_object: Callable[[str], Any]) -> None:
        for pod, value in sorted(values.items()):
            obj = pod_object(pod)
            have = ((obj or {}).get("metadata", {}).get("annotations") or {}).get(
                GPU_SHARE_ANNOTATION
            )
            if have != value:
                mark_pod(self.client, pod, GPU_SHARE_ANNOTATION, value, "GPU share")
