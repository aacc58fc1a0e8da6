"""What the MIG repartitioner is told about pending work: how many GPUs could hold a profile
if re-carved, and the pending pods' shapes per flavor."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from gpucarve.core import mig
from gpucarve.core.amounts import FlavorName
from gpucarve.core.mig import Instance
from gpucarve.core.policy import SliceKind
from gpucarve.engine.working import Working


def repartition_hint(ws: Working, flavor: FlavorName) -> int:
    """GPUs of the flavor's model whose free memory slices could hold its profile if
    their unused instances were re-carved (running instances stay where they are)."""
    info = ws.flavors[flavor].flavor
    geom = None
    for pool in ws.policy.pools:
        if pool.model.id == info.model_id:
            geom = pool.model.mig
    if geom is None or info.profile is None:
        return 0
    count = 0
    for node in ws.nodes:
        per_gpu: dict[int, list[Instance]] = {}
        has_free: set[int] = set()
        relevant = False
        for fname, gs_list in node.gpus.items():
            if (
                ws.flavors[fname].flavor.model_id != info.model_id
                or ws.kind(fname) is not SliceKind.MIG
            ):
                continue
            relevant = True
            for gs in gs_list:
                running = per_gpu.setdefault(gs.gpu, [])
                if fname == flavor and gs.free:
                    has_free.add(gs.gpu)
                free = set(gs.free)
                for o in gs.members:
                    if o not in free:
                        s = ws.cluster.slices[ws.slice_ids[o]]
                        assert s.profile is not None and s.start is not None
                        running.append(Instance(s.start, s.profile))
        if not relevant:
            continue
        for gpu, running in per_gpu.items():
            if gpu not in has_free and info.profile in mig.fitting_profiles(geom, running):
                count += 1
    return count


def shapes_from(
    plans: Iterable[tuple[FlavorName, int, int]],
) -> dict[FlavorName, Counter[int]]:
    """(flavor, slices per pod, pods) of pending work -> per flavor, pods per shape."""
    out: dict[FlavorName, Counter[int]] = {}
    for flavor, size, pods in plans:
        out.setdefault(flavor, Counter())[size] += pods
    return out
