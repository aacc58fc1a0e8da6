"""Draining GPUs for dynamic MIG that reconfigures whole GPUs (`granularity: gpu`).

The GPU Operator's MIG manager changes a GPU only when none of its instances is in use; on a
busy pool with mixed layouts that almost never happens (a GPU's 3g.40gb, 2g.20gb and 1g.10gb
instances run work of different lengths, and new work keeps landing on whichever is free), so
the instances nobody asks for stay carved while work for other profiles waits. Measured on the
three-team example at twice its load with one GPU quota per team: three changes in two days.

Before the queue's turns, per dynamic pool of whole-GPU granularity: when the MIG work that
waits for it and that its quota admits needs more instances of some profile than are free (and
than GPUs being reconfigured are creating), and no GPU of the pool is idle (an idle one is
repartitioned after the queue, as usual), the GPUs expected to empty soonest (`core.runtime`:
the latest expected end of the work on them) are drained: nothing new is placed on them this
cycle, so they empty and the repartition after the queue reshapes them. Enough GPUs are drained
to hold the missing instances' memory slices, at most `maxGpusPerCycle`. Nothing is stored
between cycles: each cycle drains again from what waits and what runs, so a drain ends when the
demand is served or gone. Opt in per pool (`mig.dynamic.drain: true`): a drain idles the free
instances of the drained GPUs until their work ends.
"""

from __future__ import annotations

from collections import Counter

from gpucarve.core.amounts import ProfileName
from gpucarve.core.cluster import UNAVAILABLE_TAINTS
from gpucarve.core.policy import Pool, SliceKind
from gpucarve.engine.decisions import Drain
from gpucarve.engine.node_state import GpuSlots
from gpucarve.engine.repartition import instances_coming
from gpucarve.engine.state import CycleState


def drain(c: CycleState) -> list[int]:
    """Keep new work off the GPUs to drain (their free slices are taken on the working state);
    returns the slices taken, for `release` after the queue."""
    taken: list[int] = []
    for pool in c.policy.pools:
        dyn = pool.mig_dynamic
        if dyn is None or dyn.keep_in_use or not dyn.drain or pool.model.mig is None:
            continue
        missing, excess = _missing(c, pool)
        if not missing or not excess:
            continue
        geom = pool.model.mig
        size = {p.name: p.memory_slices for p in geom.profiles}
        short = sum(n * size[p] for p, n in missing.items())
        spare = sum(n * size[p] for p, n in excess.items())
        wanted = min(dyn.max_gpus_per_cycle, -(-min(short, spare) // geom.memory_slices))
        what = ", ".join(f"{n} × {p}" for p, n in sorted(missing.items()))
        for gpu_id, until in _soonest(c, pool, set(excess))[:wanted]:
            taken += _take_free(c, gpu_id)
            c.decided.drain(Drain(gpu_id, until, f"drained for {what} waiting in pool {pool.name}"))
    return taken


def release(c: CycleState, taken: list[int]) -> None:
    """The drained GPUs' free slices are free again for the repartition and the accounting."""
    if taken:
        c.ws.give_back(taken, 0)


def _missing(c: CycleState, pool: Pool) -> tuple[dict[ProfileName, int], dict[ProfileName, int]]:
    """Instances per profile that MIG work waiting for `pool` (within its quota now) needs
    beyond the free ones and those GPUs being reconfigured are creating; and the free
    instances per profile beyond what waits for them (carved, and nobody's)."""
    profile_of = {f.name: f.profile for f in pool.flavors() if f.kind is SliceKind.MIG}
    want: Counter[ProfileName] = Counter()
    for w in c.snapshot.pending:
        demand = c.first_demand(w)
        mine = {f: n for f, n in demand.items() if f in profile_of}
        if mine and c.quotas.check(w.queue, demand).fits:
            for f, n in mine.items():
                profile = profile_of[f]
                if profile is not None:
                    want[profile] += n
    if not want:
        return {}, {}
    mine_gpus = {g.id for n in c.snapshot.cluster.nodes if n.pool == pool.name for g in n.gpus}
    coming: Counter[str] = Counter()
    for gpu_id, made in instances_coming(c).items():
        if gpu_id in mine_gpus:
            coming.update(made)
    missing: dict[ProfileName, int] = {}
    excess: dict[ProfileName, int] = {}
    for f, profile in profile_of.items():
        assert profile is not None
        free = c.ws.index[f].total
        short = want[profile] - free - coming[profile]
        if short > 0:
            missing[profile] = short
        elif free > want[profile]:
            excess[profile] = free - want[profile]
    return missing, excess


def _soonest(c: CycleState, pool: Pool, excess: set[str]) -> list[tuple[str, int]]:
    """The pool's GPUs with a free instance of a profile in `excess` that may change once
    empty, with when their work is expected to end, soonest first."""
    dyn = pool.mig_dynamic
    assert dyn is not None
    slices = c.snapshot.cluster.slices
    ends: dict[str, int] = {}
    for rw in c.ws.running.values():
        end = c.end_of(rw)
        for p in rw.pods:
            for sid in p.slice_ids:
                s = slices.get(sid)
                if s is not None and s.kind is SliceKind.MIG:
                    gpu_id = f"{s.node}/gpu{s.gpu}"
                    ends[gpu_id] = max(ends.get(gpu_id, 0), end)
    coming = instances_coming(c)
    out: list[tuple[str, int]] = []
    for node in c.snapshot.cluster.nodes:
        if node.pool != pool.name or any(t.key in UNAVAILABLE_TAINTS for t in node.taints):
            continue
        for g in node.gpus:
            # an idle GPU is kept free too: the queue would fill it in its old layout before
            # the repartition after the queue could reshape it
            end = ends.get(g.id, c.now)
            if g.id in coming or not _holds_free(c, g.id, excess):
                continue
            changed = c.snapshot.mig_changed_at.get(g.id)
            if changed is not None and end < changed + dyn.min_interval_s:
                continue  # it could not change then
            out.append((g.id, end))
    return sorted(out, key=lambda x: (x[1], x[0]))


def _slots(c: CycleState, gpu_id: str) -> list[GpuSlots]:
    """The working state's slots (one per flavor) of one GPU, `<node>/gpu<index>`."""
    node_name, _, index = gpu_id.rpartition("/gpu")
    node = c.ws.nodes[c.ws.node_index[node_name]]
    return [gs for slots in node.gpus.values() for gs in slots if gs.gpu == int(index)]


def _holds_free(c: CycleState, gpu_id: str, profiles: set[str]) -> bool:
    flavors = c.ws.flavors
    return any(
        gs.free and flavors[gs.flavor].flavor.profile in profiles for gs in _slots(c, gpu_id)
    )


def _take_free(c: CycleState, gpu_id: str) -> list[int]:
    out: list[int] = []
    for gs in _slots(c, gpu_id):
        if gs.free:
            out += c.ws.take(gs, len(gs.free), 0)
    return out
