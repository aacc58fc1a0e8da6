"""GPU failures replayed by the simulator, so a what-if shows what they cost: a list (a CSV
of when, which GPU, how long until it is back) or a rate (failures per GPU per day, drawn
from the run's seed, each GPU out for the repair time).

A failed GPU does what the node agent makes a real one do (`agent/health_loop.py`,
`kube/scheduler/failed_gpus.py` with `gpuHealth.evictPods`): the workloads on it lose their run and
queue again from the start (a gang loses all its pods: it cannot go on short of one), and
none of its slices are placed on until it is repaired. Its free slices are held by an owner
of their own, as the scheduler holds a GPU out of service.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, MutableMapping, Sequence

from gpucarve.config.csv_rows import read_csv, row_problem
from gpucarve.core.cluster import Allocation, ClusterState
from gpucarve.core.problems import InvalidInput, Problem
from gpucarve.core.quantity import QuantityError, whole_number
from gpucarve.core.snapshot import Step
from gpucarve.engine.decisions import Cause, CycleResult, Eviction
from gpucarve.sim.run.records import GpuFailure
from gpucarve.sim.run.sim_port import SimulatorPort

# Owner of the slices of a GPU out of service (the scheduler's `held_slices.UNHEALTHY`).
FAILED = "unhealthy:"
MAX_FAILURES = 100_000
COLUMNS = ("time_s", "node", "gpu", "repair_s")
# a failure within a year of the trace's start; a repair within 30 days (as
# --gpu-repair-hours): a GPU out for longer is gone, not failing, and takes it out of the policy
LIMITS = {"time_s": 366 * 86400, "gpu": 15, "repair_s": 30 * 86400}


def _gpus(cluster: ClusterState) -> list[str]:
    return sorted({f"{s.node}/gpu{s.gpu}" for s in cluster.slices.values()})


def from_rate(
    cluster: ClusterState, per_gpu_day: float, repair_s: int, span_s: int, seed: int
) -> tuple[GpuFailure, ...]:
    """Failures over [0, span_s): each GPU fails as a Poisson process of `per_gpu_day`,
    drawn from `seed` alone (the same seed gives the same failures, whatever the policy
    under test does with them)."""
    rng = random.Random(f"gpu-failures/{seed}")
    rate_s = per_gpu_day / 86_400
    out: list[GpuFailure] = []
    if rate_s <= 0:
        return ()
    for gpu in _gpus(cluster):
        t = rng.expovariate(rate_s)
        while t < span_s:
            out.append(GpuFailure(int(t), gpu, repair_s))
            if len(out) > MAX_FAILURES:
                raise InvalidInput(
                    "--gpu-failure-rate",
                    [Problem((), "too-many-failures",
                             f"{per_gpu_day:g} failures per GPU per day make over "
                             f"{MAX_FAILURES:,} failures in this run",
                             "use a rate of real hardware (well under 1 per GPU per day)")],
                )  # fmt: skip
            t += repair_s + rng.expovariate(rate_s)  # a GPU fails again only once it is back
    return tuple(sorted(out))


def load_failures(path: str, cluster: ClusterState) -> tuple[GpuFailure, ...]:
    """A CSV `time_s,node,gpu,repair_s` (seconds from the start of the trace; the GPU's
    index on its node)."""
    _, rows = read_csv(path, "GPU failure list", COLUMNS, COLUMNS)
    known = set(_gpus(cluster))
    nodes = {g.rpartition("/")[0] for g in known}
    problems: list[Problem] = []
    out: list[GpuFailure] = []
    for row in rows:
        if row.problem is not None:
            problems.append(row.problem)
            continue
        values: dict[str, int | None] = {}
        for col in ("time_s", "gpu", "repair_s"):
            try:
                values[col] = whole_number(row.get(col), col, LIMITS[col])
            except QuantityError as err:
                problems.append(row_problem(row.line, str(err), f"write {col} in whole seconds "
                                            f"up to {LIMITS[col]:,} (gpu: the GPU's index on its "
                                            "node; repair_s: at most 30 days)"))  # fmt: skip
                values[col] = None
        node = row.get("node")
        if node not in nodes:
            sample = ", ".join(sorted(nodes)[:3])
            fix = f"use a node name as the policy makes them ({sample} …)"
            problems.append(row_problem(row.line, f"node {node!r} is no node of the policy", fix))
            continue
        if None in values.values():
            continue
        gpu = f"{node}/gpu{values['gpu']}"
        if gpu not in known:
            problems.append(row_problem(row.line, f"{node} has no GPU {values['gpu']}",
                                        "use an index below the pool's gpusPerNode"))  # fmt: skip
            continue
        if values["repair_s"] == 0:
            fix = "give the seconds until it is back in service"
            problems.append(row_problem(row.line, "repair_s 0: the GPU would never be out", fix))
            continue
        out.append(GpuFailure(int(values["time_s"] or 0), gpu, int(values["repair_s"] or 0)))
    last: dict[str, GpuFailure] = {}
    for f in sorted(out, key=lambda f: (f.gpu, f.at_s)):
        before = last.get(f.gpu)
        if before is not None and f.at_s < before.at_s + before.repair_s:
            back = before.at_s + before.repair_s
            problems.append(Problem((), "overlapping-failures",
                                    f"{f.gpu} fails at {f.at_s} s while still out from "
                                    f"{before.at_s} s (repaired at {back} s)",
                                    "list a GPU's next failure after its repair"))  # fmt: skip
        last[f.gpu] = f
    if len(out) > MAX_FAILURES:
        problems.append(Problem((), "too-many-failures", f"{len(out):,} failures",
                                f"list at most {MAX_FAILURES:,}"))  # fmt: skip
    if problems:
        if len(problems) > 20:
            more = len(problems) - 19
            problems = [
                *problems[:19],
                Problem((), "more-problems", f"and {more} more", "fix the above first"),
            ]
        raise InvalidInput(path, problems)
    return tuple(sorted(out))


def hold(
    cluster: ClusterState, allocs: MutableMapping[str, Allocation], gpu: str
) -> list[Allocation]:
    """Hold every free slice of `gpu`; the allocations made."""
    taken = []
    for sid in _slices_of(cluster, gpu):
        if sid not in allocs:
            s = cluster.slices[sid]
            a = Allocation(sid, f"{FAILED}{gpu}", s.compute_milli, s.memory_mib)
            allocs[sid] = a
            taken.append(a)
    return taken


def on_gpu(cluster: ClusterState, allocs: MutableMapping[str, Allocation], gpu: str) -> list[str]:
    """Owners of the slices of `gpu` (pods, and any other holder), in order."""
    return sorted({allocs[sid].owner for sid in _slices_of(cluster, gpu) if sid in allocs})


def gpu_seconds_out(failures: Sequence[tuple[int, str, int | None]], start: int, end: int) -> float:
    """GPU-seconds out of service within [start, end): each failure from its time to its
    repair (or the end of the run)."""
    total = 0.0
    for at, _, back in failures:
        total += max(0, min(end, back if back is not None else end) - max(start, at))
    return total


def rehold(allocs: MutableMapping[str, Allocation], sids: Sequence[str], gpu: str) -> Step:
    """Slices held for another reason (a MIG change finishing) held now for the failure."""
    freed = tuple(allocs[sid] for sid in sids)
    taken = tuple(
        Allocation(a.slice_id, f"{FAILED}{gpu}", a.compute_milli, a.memory_mib) for a in freed
    )
    for a in taken:
        allocs[a.slice_id] = a
    return Step(freed=freed, taken=taken)


def fail(sim: SimulatorPort, gpu: str, now: int) -> None:
    """`gpu` fails at `now`: what runs on it stops and queues again, its slices are held."""
    sim.flush_finished()  # a workload that completed this instant is not on it any more
    cluster = sim.snapshot.cluster
    if next(_slices_of(cluster, gpu), None) is None:
        return  # a GPU this policy's cluster does not have (a baseline laid out otherwise)
    owners = on_gpu(cluster, sim.allocs, gpu)
    # owners are pods (`<workload>/<set>-<i>`); the workload is all before the last slash
    victims = tuple(sorted({w for o in owners if (w := o.rpartition("/")[0]) in sim.live}))
    if victims:
        evictions = tuple(
            Eviction(w, sim.live[w].workload.queue, Cause.GPU_FAILURE, gpu,
                     f"GPU {gpu} failed under it; it starts over")
            for w in victims
        )  # fmt: skip
        sim.apply_result(CycleResult(now, evictions=evictions), now)
    taken = hold(sim.snapshot.cluster, sim.allocs, gpu)
    sim.out_of_service[gpu] = (len(sim.result.gpu_failures), [a.slice_id for a in taken])
    sim.result.gpu_failures.append((now, gpu, None, victims))
    if taken:
        sim.change_allocations(Step(taken=tuple(taken)))


def repair(sim: SimulatorPort, gpu: str, now: int) -> None:
    entry = sim.out_of_service.pop(gpu, None)
    if entry is None:
        return
    index, held = entry
    at, _, _, victims = sim.result.gpu_failures[index]
    sim.result.gpu_failures[index] = (at, gpu, now, victims)
    freed = tuple(sim.allocs.pop(sid) for sid in held if sid in sim.allocs)
    if freed:
        sim.change_allocations(Step(freed=freed))


def _slices_of(cluster: ClusterState, gpu: str) -> Iterator[str]:
    """The slice ids of `gpu` (`node/gpuN`) in the cluster as it is laid out now; none for a
    GPU it does not have."""
    node, _, index = gpu.rpartition("/gpu")
    try:
        gpus = cluster.node(node).gpus
    except KeyError:
        return iter(())
    return iter(next((g.slice_ids for g in gpus if str(g.index) == index), ()))
