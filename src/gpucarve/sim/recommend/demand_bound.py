"""How busy a pool could have been on a trace, whatever the policy: the demand bound.

Each pool's work is replayed as if its GPUs were one pot with perfect packing: no nodes, no MIG
placements, no quotas, no gangs spread over nodes, first come first served with every later
arrival that fits started at once (backfill). Every pod set one of the pool's flavors could
serve counts (work another pool could take too counts in both: the bound stays a bound). A pod
set takes its share of the pot: a MIG instance its memory slices' share of a GPU (its
placement size), a whole GPU one, a shared replica 1/replicas; it holds its charge (the
allocation figures' measure) for its own duration. What that replay holds on average over the
window is about the most any policy could hold on the real cluster (work slowed by sharing a
GPU runs longer than its duration, so a shared pool's run can exceed it), so a run near it is
bound by demand and a recommendation cannot do much better (`simulate --recommend` prints both).
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpucarve.core.policy import Flavor, Policy, flavor_pools, gpu_shares
from gpucarve.core.requests import candidate_flavors, pod_set_gpus
from gpucarve.core.workload import Workload
from gpucarve.sim.run.metrics import percentile

# queued work looked through for backfill at each event (the bound stays linear on long traces)
SCAN = 2_000


@dataclass(frozen=True, slots=True)
class _Job:
    arrival: int
    size: float  # share of the pot (GPUs)
    charge: float  # GPUs held, as the allocation figures count them
    duration: int


def _jobs(policy: Policy, workloads: Sequence[Workload]) -> dict[str, list[_Job]]:
    out: defaultdict[str, list[_Job]] = defaultdict(list)
    each = _jobs_of(policy)
    for w in workloads:
        for pool, jobs in each(w).items():
            out[pool] += jobs
    return out


def _jobs_of(policy: Policy) -> Callable[[Workload], dict[str, list[_Job]]]:
    """Pool -> the jobs one workload brings it (none without a duration); the policy's
    flavor tables worked out once for every workload asked about."""
    pools = flavor_pools(policy)
    share = gpu_shares(policy)

    def of(w: Workload) -> dict[str, list[_Job]]:
        out: dict[str, list[_Job]] = {}
        if w.duration is None:
            return out
        for ps in w.pod_sets:
            first: dict[str, Flavor] = {}
            for f in candidate_flavors(policy, ps.gpu):
                first.setdefault(pools[f.name], f)  # the pool's first choice for it
            for pool, f in first.items():
                slices, charge = pod_set_gpus(policy, ps.gpu, ps.count, f)
                job = _Job(w.submit_time, slices * share[f.name], charge, w.duration)
                out.setdefault(pool, []).append(job)
        return out

    return of


def _held(jobs: list[_Job], capacity: float, start: int, end: int) -> float:
    """GPU-seconds (charge) held within [start, end) by the pot replay."""
    jobs = sorted(jobs, key=lambda j: (j.arrival, -j.size))
    running: list[tuple[int, float, float]] = []  # (end, size, charge)
    queue: list[_Job] = []
    busy = held = 0.0
    i = 0
    t = start
    while (i < len(jobs) or running) and t < end:
        nxt = min(jobs[i].arrival if i < len(jobs) else end, running[0][0] if running else end)
        t = max(t, nxt)
        while running and running[0][0] <= t:
            _, size, _ = heapq.heappop(running)
            busy -= size
        while i < len(jobs) and jobs[i].arrival <= t:
            queue.append(jobs[i])
            i += 1
        kept = []
        for k, j in enumerate(queue):
            if k < SCAN and busy + j.size <= capacity + 1e-9:
                busy += j.size
                heapq.heappush(running, (t + j.duration, j.size, j.charge))
                held += j.charge * max(0, min(t + j.duration, end) - max(t, start))
            else:
                kept.append(j)
        queue = kept
        if not running and i >= len(jobs):
            break
    return held


def demand_bound(
    policy: Policy, workloads: Sequence[Workload], window: tuple[int, int]
) -> dict[str, float]:
    """Pool -> the most GPUs (charge) its work could have held on average over `window`."""
    start, end = window
    span = max(1, end - start)
    gpus: defaultdict[str, float] = defaultdict(float)
    for pool in policy.pools:
        gpus[pool.name] = pool.gpus
    out: dict[str, float] = {}
    for name, jobs in sorted(_jobs(policy, workloads).items()):
        capacity = sum(gpus[p] for p in name.split("+"))
        out[name] = round(_held(jobs, capacity, start, end) / span, 2)
    return out


# Orders the queue may be served in, in the alone replay: its arrival order, and two that
# favour short or small work (either can lower a p95 below the arrival order's).
ORDERS: dict[str, Callable[[_Job], tuple[float, ...]]] = {
    "arrival": lambda j: (j.arrival,),
    "shortest": lambda j: (j.duration, j.arrival),
    "smallest": lambda j: (j.size, j.duration, j.arrival),
}


def _starts(
    jobs: Sequence[_Job], capacity: float, order: Callable[[_Job], tuple[float, ...]]
) -> list[int | None]:
    """When each of `jobs` starts in the pot replay, its waiting work taken in `order` (with
    backfill: every one that fits starts); None for one that never fits. In the order of
    `jobs`."""
    ids = sorted(range(len(jobs)), key=lambda k: (jobs[k].arrival, k))
    start: list[int | None] = [None] * len(jobs)
    running: list[tuple[int, float]] = []  # (end, size)
    waiting: list[int] = []
    busy = 0.0
    i = t = 0
    while i < len(ids) or waiting:
        events = [jobs[ids[i]].arrival] if i < len(ids) else []
        if running:
            events.append(running[0][0])
        if not events:
            break  # what waits is larger than the pot: it never starts
        t = max(t, min(events))
        while running and running[0][0] <= t:
            busy -= heapq.heappop(running)[1]
        while i < len(ids) and jobs[ids[i]].arrival <= t:
            waiting.append(ids[i])
            i += 1
        waiting.sort(key=lambda k: (*order(jobs[k]), k))
        kept = []
        for n, k in enumerate(waiting):
            if n < SCAN and busy + jobs[k].size <= capacity + 1e-9:
                busy += jobs[k].size
                heapq.heappush(running, (t + jobs[k].duration, jobs[k].size))
                start[k] = t
            else:
                kept.append(k)
        waiting = kept
    return start


def wait_alone_p95(
    policy: Policy, workloads: Sequence[Workload], queue: str, end: int
) -> float | None:
    """The least wait p95 (seconds; waits counted to `end` at most, as the run counts them)
    that `queue`'s work could have had with the GPUs of its pools to itself: every other
    queue's work gone at once, perfect packing, and the best of the `ORDERS`. Work some pod
    set of which another pool could also serve is counted as starting at once. The replay
    gives the queue all a policy could but the order its work goes in, of which it takes the
    best of three: a stated bound below this is out of reach on the trace short of more GPUs.
    None when the queue has no work with a duration here."""
    mine = [w for w in workloads if w.queue == queue and w.duration is not None]
    if not mine:
        return None
    gpus = {p.name: float(p.gpus) for p in policy.pools}
    only: defaultdict[str, list[tuple[int, _Job]]] = defaultdict(list)  # pool -> (workload, job)
    single: set[int] = set()  # workloads only one pool serves
    each = _jobs_of(policy)
    for n, w in enumerate(mine):
        per = each(w)
        if len(per) == 1:
            ((pool, jobs),) = per.items()
            only[pool] += [(n, j) for j in jobs]
            single.add(n)
    best: float | None = None
    for order in ORDERS.values():
        # a workload waits until its first pod set starts, as the run counts it
        wait = [0.0 if n not in single else float(end - mine[n].submit_time)
                for n in range(len(mine))]  # fmt: skip
        for pool, pairs in only.items():
            capacity = sum(gpus[p] for p in pool.split("+"))
            begun = _starts([j for _, j in pairs], capacity, order)
            for (n, j), s in zip(pairs, begun, strict=True):
                at = end if s is None else min(s, end)
                wait[n] = min(wait[n], float(max(0, at - j.arrival)))
        p95 = percentile(wait, 95)
        best = p95 if best is None else min(best, p95)
    return best
