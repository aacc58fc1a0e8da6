"""Dynamic MIG in the simulator: a repartitioned GPU's destroyed instances go at once, its
created ones are held by the reconfiguration until the MIG manager would have made them
(`SimConfig.mig_reconfigure_s`), as the scheduler holds them on a cluster. On a DRA pool the
driver creates a partition when its claim is prepared: no reconfiguration to wait for."""

from __future__ import annotations

from types import MappingProxyType

from gpucarve.core.cluster import RECONFIGURING, Allocation, relayout
from gpucarve.core.policy import DeviceApi
from gpucarve.core.snapshot import Snapshot, Step
from gpucarve.engine import CycleResult
from gpucarve.sim.run import failures
from gpucarve.sim.run.fragmentation import FragmentationProbe
from gpucarve.sim.run.records import Kind
from gpucarve.sim.run.sim_port import SimulatorPort


def may_change(sim: SimulatorPort, result: CycleResult, now: int) -> bool:
    """MIG work waits unserved while a dynamic pool's GPU is held back by its minimum
    interval: a later cycle may still repartition it."""
    if not result.mig_unserved:
        return False
    intervals = {p.name: p.mig_dynamic.min_interval_s for p in sim.policy.pools if p.mig_dynamic}
    pools = {n.name: n.pool for n in sim.snapshot.cluster.nodes}
    for gpu, at in sim.snapshot.mig_changed_at.items():
        interval = intervals.get(pools.get(gpu.rpartition("/")[0], ""))
        if interval is not None and now - at < interval:
            return True
    return False


def repartition(sim: SimulatorPort, result: CycleResult, now: int) -> None:
    """New MIG layouts: destroyed instances go at once, created ones are held by the
    reconfiguration until it is done."""
    layouts = {r.gpu_id: r.layout for r in result.repartitions}
    cluster = relayout(sim.policy, sim.snapshot.cluster, layouts)
    dra = {p.name for p in sim.policy.pools if p.devices is DeviceApi.DRA}
    pools = {n.name: n.pool for n in cluster.nodes}
    changed = dict(sim.snapshot.mig_changed_at)
    for r in result.repartitions:
        changed[r.gpu_id] = now
        owner = f"{RECONFIGURING}{r.gpu_id}"
        held = []
        for inst in r.created:
            sid = f"{r.gpu_id}/{inst.profile}@{inst.start}"
            sl = cluster.slices[sid]
            sim.allocs[sid] = Allocation(sid, owner, sl.compute_milli, sl.memory_mib)
            held.append(sid)
        sim.reconfiguring[r.gpu_id] = held
        sim.result.repartitions.append((now, r.gpu_id, r.reason))
        at_once = pools.get(r.node) in dra
        sim.push(
            now + (0 if at_once else sim.config.mig_reconfigure_s), Kind.RECONFIGURED, r.gpu_id
        )
    s = sim.snapshot
    # new nodes and slices: the engine rebuilds its view (no delta)
    sim.snapshot = Snapshot(
        s.policy,
        cluster.with_allocations(sim.allocs.frozen()),
        s.running,
        s.pending,
        None,
        MappingProxyType(changed),
        runtimes=s.runtimes,
        usage=s.usage,
    )
    sim.probe = FragmentationProbe(sim.policy, sim.snapshot.cluster)


def reconfigured(sim: SimulatorPort, gpu: str) -> None:
    if gpu in sim.out_of_service:
        # created on a GPU that failed meanwhile: held with it until the repair
        held = sim.reconfiguring.pop(gpu, [])
        step = failures.rehold(sim.allocs, held, gpu)
        sim.out_of_service[gpu][1].extend(held)
        sim.change_allocations(step)
        return
    freed = tuple(sim.allocs.pop(sid) for sid in sim.reconfiguring.pop(gpu, []))
    if freed:
        sim.change_allocations(Step(freed=freed))
