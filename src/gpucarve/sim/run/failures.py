"""GPU failures replayed by the simulator, so a what-if shows what they cost: a list (a CSV
of when, which GPU, how long until it is back, and optionally its fault class) or a rate
(failures per GPU per day, drawn from the run's seed, each with a fault class drawn from
`CLASS_MIX`).

A failed GPU does what the node agent and the scheduler make a real one do
(`agent/health_loop.py`, `kube/scheduler/failed_gpus.py`): none of its slices are placed on
until it is back, its free slices held by an owner of their own, as the scheduler holds a GPU
out of service. Under gpucarve (`SimConfig.gpu_health`) the fault's class decides the rest: a
class that drains by eviction stops the workloads on it, which queue again from the start (a
gang loses all its pods: it cannot go on short of one), a class that lets work finish leaves
them running and the remedy waits for them; the GPU is back after its class's remedy
(`time_out`: a reset, a reboot or cooling down, then the clean checks; a repair by a person for
a class that needs the GPU serviced). Without gpucarve (the baselines) every failure stops its
work and waits for a person's repair (`repair_s`).
"""

from __future__ import annotations

import random
from collections.abc import Iterator, MutableMapping, Sequence

from gpucarve.config.csv_rows import read_csv, row_problem
from gpucarve.core.cluster import OUT_OF_SERVICE, Allocation, ClusterState
from gpucarve.core.gpu_faults import CLASSES, Action
from gpucarve.core.policy import GpuHealth
from gpucarve.core.problems import InvalidInput, Problem
from gpucarve.core.quantity import QuantityError, whole_number
from gpucarve.core.snapshot import Step
from gpucarve.engine.decisions import Cause, CycleResult, Eviction
from gpucarve.sim.run.records import GpuFailure, Kind
from gpucarve.sim.run.sim_port import SimulatorPort

# Owner of the slices of a GPU out of service, as the scheduler holds them.
FAILED = OUT_OF_SERVICE
MAX_FAILURES = 100_000
COLUMNS = ("time_s", "node", "gpu", "repair_s")
# a failure within a year of the trace's start; a repair within 30 days (as
# --gpu-repair-hours): a GPU out for longer is gone, not failing, and takes it out of the policy
LIMITS = {"time_s": 366 * 86400, "gpu": 15, "repair_s": 30 * 86400}


# The simulator's assumption of how often each class comes, for drawn failures: most are
# memory faults (XID 48/63/94/95 and their ECC counters), then GPUs fallen off the bus, NVLink
# errors, and heat. A list of failures names its own classes.
CLASS_MIX: tuple[tuple[str, int], ...] = (
    ("memory-uncorrected", 20),
    ("contained-memory", 15),
    ("remap-pending", 15),
    ("fallen-off-bus", 20),
    ("nvlink", 15),
    ("thermal", 10),
    ("remap-failed", 5),
)
# How long each remedy takes before the clean checks begin.
RESET_S = 60  # nvidia-smi --gpu-reset on an idle GPU
REBOOT_S = 900  # a remediation controller drains and reboots the node
COOL_S = 600  # a hot GPU back under its limit less the hysteresis


def time_out(f: GpuFailure, health: GpuHealth | None) -> int | None:
    """Seconds from the failure until the GPU may be back (a class that waits for its work to
    finish may take longer: `repair` puts it off), or None for a class that takes nothing out
    of service."""
    if health is None or not f.fault_class:
        return f.repair_s
    cls = health.fault_class(f.fault_class)
    checks = health.clean_checks * health.check_s
    if cls.action is Action.REPORT:
        return None
    if cls.action is Action.REPLACE:
        return f.repair_s
    remedy = {Action.RESET: RESET_S, Action.REBOOT: REBOOT_S, Action.WAIT: COOL_S}[cls.action]
    return remedy + checks


def _draw_class(rng: random.Random) -> str:
    names = [c for c, _ in CLASS_MIX]
    return rng.choices(names, weights=[w for _, w in CLASS_MIX])[0]


def _gpus(cluster: ClusterState) -> list[str]:
    return sorted({f"{s.node}/gpu{s.gpu}" for s in cluster.slices.values()})


def from_rate(
    cluster: ClusterState, per_gpu_day: float, repair_s: int, span_s: int, seed: int
) -> tuple[GpuFailure, ...]:
    """Failures over [0, span_s): each GPU fails as a Poisson process of `per_gpu_day`,
    drawn from `seed` alone (the same seed gives the same failures, whatever the policy
    under test does with them)."""
    rng = random.Random(f"gpu-failures/{seed}")
    # the classes from a stream of their own: the same times as before classes were drawn
    classes = random.Random(f"gpu-failure-classes/{seed}")
    rate_s = per_gpu_day / 86_400
    out: list[GpuFailure] = []
    if rate_s <= 0:
        return ()
    for gpu in _gpus(cluster):
        t = rng.expovariate(rate_s)
        while t < span_s:
            out.append(GpuFailure(int(t), gpu, repair_s, _draw_class(classes)))
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
    """A CSV `time_s,node,gpu,repair_s[,class]` (seconds from the start of the trace; the
    GPU's index on its node; the time a person's repair takes; the fault class, which under
    gpucarve decides the drain and the remedy instead)."""
    _, rows = read_csv(path, "GPU failure list", COLUMNS, (*COLUMNS, "class"))
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
        cls = row.get("class")
        if cls and cls not in CLASSES:
            fix = f"use a fault class ({', '.join(CLASSES)}) or leave it empty"
            problems.append(row_problem(row.line, f"class {cls!r} is no fault class", fix))
            continue
        out.append(GpuFailure(int(values["time_s"] or 0), gpu, int(values["repair_s"] or 0), cls))
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


def hold_freed(sim: SimulatorPort, step: Step) -> None:
    """Slices of GPUs out of service that `step` freed (work left to finish there ended, or
    was stopped): held at once, as the scheduler holds a GPU out of service whole."""
    slices = sim.snapshot.cluster.slices
    taken = []
    for a in step.freed:
        s = slices.get(a.slice_id)
        gpu = None if s is None else f"{s.node}/gpu{s.gpu}"
        entry = sim.out_of_service.get(gpu) if gpu is not None else None
        if s is None or entry is None or a.slice_id in sim.allocs:
            continue
        held = Allocation(a.slice_id, f"{FAILED}{gpu}", s.compute_milli, s.memory_mib)
        sim.allocs[a.slice_id] = held
        entry[1].append(a.slice_id)
        taken.append(held)
    if taken:
        sim.change_allocations(Step(taken=tuple(taken)))


def rehold(allocs: MutableMapping[str, Allocation], sids: Sequence[str], gpu: str) -> Step:
    """Slices held for another reason (a MIG change finishing) held now for the failure."""
    freed = tuple(allocs[sid] for sid in sids)
    taken = tuple(
        Allocation(a.slice_id, f"{FAILED}{gpu}", a.compute_milli, a.memory_mib) for a in freed
    )
    for a in taken:
        allocs[a.slice_id] = a
    return Step(freed=freed, taken=taken)


def _workloads_on(sim: SimulatorPort, gpu: str) -> tuple[str, ...]:
    owners = on_gpu(sim.snapshot.cluster, sim.allocs, gpu)
    # owners are pods (`<workload>/<set>-<i>`); the workload is all before the last slash
    return tuple(sorted({w for o in owners if (w := o.rpartition("/")[0]) in sim.live}))


def fail(sim: SimulatorPort, gpu: str, now: int, fault_class: str = "") -> None:
    """`gpu` fails at `now`: its free slices are held; what runs on it stops and queues again
    unless its class lets work finish."""
    sim.flush_finished()  # a workload that completed this instant is not on it any more
    cluster = sim.snapshot.cluster
    if next(_slices_of(cluster, gpu), None) is None:
        return  # a GPU this policy's cluster does not have (a baseline laid out otherwise)
    health = sim.config.gpu_health
    evicts = health is None or not fault_class or health.evicts(fault_class)
    victims = _workloads_on(sim, gpu) if evicts else ()
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
    sim.result.gpu_failure_classes.append(fault_class)
    if taken:
        sim.change_allocations(Step(taken=tuple(taken)))


def repair(sim: SimulatorPort, payload: str, now: int) -> None:
    """The GPU's remedy is done (`node/gpuN`), or (`node/gpuN#wait:S`) its work was left to
    finish and the remedy, S seconds with its clean checks, starts once nothing runs on it."""
    gpu, _, wait = payload.partition("#wait:")
    entry = sim.out_of_service.get(gpu)
    if entry is None:
        return
    health = sim.config.gpu_health
    if health is not None:
        sim.flush_finished()
        if _workloads_on(sim, gpu):
            # the agent finds the GPU still held at its next check
            remedy = wait or str(now - sim.result.gpu_failures[entry[0]][0])
            sim.push(now + health.check_s, Kind.GPU_REPAIRED, f"{gpu}#wait:{remedy}")
            return
        if wait:
            sim.push(now + int(wait), Kind.GPU_REPAIRED, gpu)
            return
    del sim.out_of_service[gpu]
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
