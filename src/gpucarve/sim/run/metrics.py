"""What a simulated run did, per pool and per team, in numbers a platform team reads.

All time-weighted figures integrate the run's intervals (one per uninterrupted run of a
workload) over the window from the first arrival to the end of the run. A slice counts with
its charge (the dominant share of its GPU, see `gpucarve.core.requests`), so a 3g.40gb held for
an hour is 0.496 GPU-hours of an A100-80GB.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpucarve.core.amounts import FlavorName, QuotaKey, as_flavor
from gpucarve.core.cluster import ClusterState, Slice, build_cluster, potential_mig_slices
from gpucarve.core.policy import Policy, Queue, SliceKind
from gpucarve.core.requests import slice_gpus
from gpucarve.core.workload import GpuKind, Workload
from gpucarve.engine.decisions import Cause, Idle, IdleCause
from gpucarve.sim.run.failures import gpu_seconds_out
from gpucarve.sim.run.fairness import fairness
from gpucarve.sim.run.idle import by_cause, idle_gpu_seconds
from gpucarve.sim.run.records import Interval, SimResult

HOUR = 3600.0


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, min(len(ordered), int(-(-q * len(ordered) // 100))))
    return float(ordered[rank - 1])


def is_dev(w: Workload) -> bool:
    """Dev and notebook work: it asks for shared replicas or a fraction of a GPU."""
    return any(ps.gpu.kind in (GpuKind.SHARED, GpuKind.FRACTION) for ps in w.pod_sets)


@dataclass(frozen=True)
class SliceBook:
    """Per slice of a policy's cluster: its pool and flavor; per flavor: what one slice is
    worth in GPUs (its charge) and in SMs; per pool: those summed."""

    slices: dict[str, tuple[str, FlavorName]]
    gpu: dict[FlavorName, float]
    sm: dict[FlavorName, int]
    pool_gpus: dict[str, float]
    pool_sms: dict[str, float]
    cluster: ClusterState
    # every slice a pod may hold, including those dynamic MIG can create
    lookup: dict[str, Slice]


def slice_book(policy: Policy) -> SliceBook:
    cluster = build_cluster(policy)
    pool_of_node = {n.name: n.pool for n in cluster.nodes}
    gpu = slice_gpus(policy)
    sm = {f: fl.sm_count for f, fl in policy.flavors.items()}
    slices: dict[str, tuple[str, FlavorName]] = {}
    pool_gpus: defaultdict[str, float] = defaultdict(float)
    pool_sms: defaultdict[str, float] = defaultdict(float)
    for sid, s in cluster.slices.items():
        pool = pool_of_node[s.node]
        slices[sid] = (pool, s.flavor)
        pool_gpus[pool] += gpu[s.flavor]
        pool_sms[pool] += sm[s.flavor]
    lookup = potential_mig_slices(policy, cluster)
    for sid, s in lookup.items():
        slices.setdefault(sid, (pool_of_node[s.node], s.flavor))
    return SliceBook(slices, gpu, sm, dict(pool_gpus), dict(pool_sms), cluster, lookup)


def summarize(
    result: SimResult,
    utilisation: Mapping[str, float] | None = None,
    window: tuple[int, int] | None = None,
    dev: set[str] | None = None,
    entitlement: Policy | None = None,
) -> dict[str, Any]:
    """`window` (start, end) clips the time-weighted figures, so runs that end at different
    times compare over the same stretch; by default from the first arrival to the run's end.
    `dev` names the dev and notebook workloads (by default those asking for shared replicas or
    fractions; a baseline that turned them into whole GPUs must pass the original set).
    `entitlement`: the policy whose queues and cohorts the fairness figures judge by (by
    default the run's; a baseline passes the policy it stands in for)."""
    policy = result.policy
    util = utilisation or {}
    book = slice_book(policy)
    slices, sm = book.slices, book.sm
    pool_capacity, pool_sms = book.pool_gpus, book.pool_sms
    if window is None:
        window = (min((w.submit_time for w in result.submitted.values()), default=0), result.end)
    w_start, w_end = window
    span = max(1, w_end - w_start)

    prices = {p.name: p.price_per_gpu_hour for p in policy.pools}

    held: defaultdict[str, float] = defaultdict(float)  # pool -> GPU-seconds allocated
    busy_sm: defaultdict[str, float] = defaultdict(float)  # pool -> SM-seconds kept busy
    team_gpu_s: defaultdict[str, float] = defaultdict(float)
    team_cost: defaultdict[str, float] = defaultdict(float)
    lost_gpu_s = 0.0
    failed_gpu_s = 0.0  # work lost when the GPU under it failed
    incomplete_gpu_s = 0.0
    quota_use: defaultdict[tuple[str, FlavorName], float] = defaultdict(float)  # slice-seconds
    held_idle_s: defaultdict[str, float] = defaultdict(float)  # queue -> GPU-seconds idle
    for iv in result.intervals:
        seconds = max(0, min(iv.end, w_end) - max(iv.start, w_start))
        # the stretch its GPUs sat idle (the trace's idle model): held, not busy
        idle_s = seconds - max(0, min(busy_until(result, iv), w_end) - max(iv.start, w_start))
        for pod in iv.pods:
            for sid in pod.slice_ids:
                pool, flavor = slices[sid]
                gpu = book.gpu[flavor]
                held[pool] += gpu * seconds
                if iv.outcome != "incomplete":  # a part-placed gang holds its GPUs idle
                    u = util.get(iv.workload, 60.0) / 100
                    busy_sm[pool] += sm[flavor] * u * (seconds - idle_s)
                    held_idle_s[iv.queue] += gpu * idle_s
                team_gpu_s[iv.queue] += gpu * seconds
                price = prices[pool]
                if price is not None:
                    team_cost[iv.queue] += gpu * seconds / HOUR * price
                quota_use[(iv.queue, flavor)] += seconds
                if iv.outcome == "evicted":
                    lost_gpu_s += gpu * seconds
                elif iv.outcome == "failed":
                    failed_gpu_s += gpu * seconds
                elif iv.outcome == "incomplete":
                    incomplete_gpu_s += gpu * seconds

    waits: dict[str, list[float]] = defaultdict(list)
    dev_waits: list[float] = []
    for w in result.submitted.values():
        begun = result.first_start.get(w.id)
        wait = (begun if begun is not None else result.end) - w.submit_time
        waits[w.queue].append(wait)
        waits["all"].append(wait)
        if (w.id in dev) if dev is not None else is_dev(w):
            dev_waits.append(wait)

    gangs = [w for w in result.submitted.values() if w.pods > 1]
    evicted = {v for _, v, _, _ in result.evictions}
    # first try: started whole, never held GPUs part-placed, never evicted
    gang_ok = [
        w
        for w in gangs
        if w.id in result.first_start and w.id not in evicted and w.id not in result.held_incomplete
    ]

    stranded = stranded_gpu_seconds(result, w_start, w_end)
    gpu_busy, gpu_in_use = gpu_seconds(result, util, w_start, w_end, book)
    physical = {p.name: p.gpus for p in policy.pools}
    pools: dict[str, dict[str, Any]] = {
        p: {
            "gpus": round(pool_capacity[p], 3),
            "gpu_busy": round(gpu_busy.get(p, 0.0) / (physical[p] * span), 4)
            if physical.get(p)
            else 0.0,
            "fragmentation": round(stranded.get(p, 0.0) / (pool_capacity[p] * span), 4)
            if pool_capacity[p]
            else 0.0,
            "allocation": round(held[p] / (pool_capacity[p] * span), 4)
            if pool_capacity[p]
            else 0.0,
            "sm_utilisation": round(busy_sm[p] / (pool_sms[p] * span), 4) if pool_sms[p] else 0.0,
        }
        for p in sorted(pool_capacity)
    }
    total_cap = sum(pool_capacity.values())
    idle = _idle(result, book, held, (w_start, w_end))
    for p, causes in idle.items():
        if p in pools:
            pools[p]["idle_gpu_hours"] = causes
    completion = completion_times(result)
    teams = {}
    for q in policy.queues:
        ws = waits.get(q.name, [])
        teams[q.name] = {
            "workloads": len(ws),
            "wait_p50_s": percentile(ws, 50),
            "wait_p95_s": percentile(ws, 95),
            "wait_max_s": max(ws, default=0.0),
            **completion_figures(completion, q.name),
            "gpu_hours": round(team_gpu_s[q.name] / HOUR, 2),
            **(
                {"gpu_hours_held_idle": round(held_idle_s[q.name] / HOUR, 2)}
                if result.idle_after
                else {}
            ),
            "cost_usd": round(team_cost[q.name], 2),
            "quota_use": {
                quota.flavor: round(
                    _key_use(policy, q.name, quota.flavor, quota_use) / (quota.nominal * span), 4
                )
                for quota in q.quotas
                if quota.nominal
            },
        }
    return {
        "window_s": span,
        "workloads": len(result.submitted),
        "completed": len(result.completed),
        "never_started": len(result.never_started),
        "cycles": result.cycles,
        "allocation": round(sum(held.values()) / (total_cap * span), 4) if total_cap else 0.0,
        "sm_utilisation": round(sum(busy_sm.values()) / (sum(pool_sms.values()) * span), 4)
        if pool_sms
        else 0.0,
        "wait_p50_s": percentile(waits["all"], 50),
        "wait_p95_s": percentile(waits["all"], 95),
        "wait_max_s": max(waits["all"], default=0.0),
        **completion_figures(completion, "all"),
        "gpu_hours_redone": round((lost_gpu_s + failed_gpu_s) / HOUR, 2),
        "dev_time_to_first_gpu_p50_s": percentile(dev_waits, 50),
        "dev_time_to_first_gpu_p95_s": percentile(dev_waits, 95),
        "gpu_busy": round(sum(gpu_busy.values()) / (sum(physical.values()) * span), 4)
        if physical
        else 0.0,
        # Busy over the GPUs pods hold: what per-pod DCGM dashboards show, and the waste
        # sharing removes (idle notebooks on whole GPUs, part-placed gangs holding theirs).
        "gpu_busy_in_use": round(sum(gpu_busy.values()) / sum(gpu_in_use.values()), 4)
        if sum(gpu_in_use.values())
        else 0.0,
        "fragmentation": round(sum(stranded.values()) / (total_cap * span), 4)
        if total_cap
        else 0.0,
        "gang_first_try_success": round(len(gang_ok) / len(gangs), 4) if gangs else 1.0,
        "gangs": len(gangs),
        "gpu_hours_held_by_incomplete_gangs": round(incomplete_gpu_s / HOUR, 2),
        "preemptions": sum(1 for e in result.evictions if e[3] != Cause.IDLE),
        **_idle_reclaims(result, held_idle_s, book),
        "gpu_hours_lost_to_preemption": round(lost_gpu_s / HOUR, 2),
        "gpu_failures": len(result.gpu_failures),
        "gpu_hours_lost_to_failures": round(failed_gpu_s / HOUR, 2),
        "gpu_hours_out_of_service": round(
            gpu_seconds_out([f[:3] for f in result.gpu_failures], w_start, w_end) / HOUR, 2
        ),
        **_failures_by_class(result, slices, book.gpu, (w_start, w_end)),
        "idle_gpu_hours": _total_idle(idle),
        "pools": pools,
        "teams": teams,
        "fairness": fairness(
            result,
            (w_start, w_end),
            book.gpu,
            slices,
            entitlement or policy,
        ),
    }


def _failures_by_class(
    result: SimResult,
    slices: Mapping[str, tuple[str, FlavorName]],
    gpu: Mapping[FlavorName, float],
    window: tuple[int, int],
) -> dict[str, Any]:
    """Per fault class: failures, GPU-hours out of service, GPU-hours of work lost (runs
    stopped by the failure) and the mean hours until the GPU was back (those back by the end);
    nothing when no GPU failed."""
    if not result.gpu_failures:
        return {}
    classes = result.gpu_failure_classes
    stopped: dict[tuple[str, int], str] = {}  # (workload, time) -> class
    rows: dict[str, dict[str, float]] = {}
    back_s: defaultdict[str, list[int]] = defaultdict(list)
    for i, (at, g, back, victims) in enumerate(result.gpu_failures):
        cls = (classes[i] if i < len(classes) else "") or "unclassed"
        row = rows.setdefault(cls, {"failures": 0, "gpu_hours_out": 0.0, "gpu_hours_lost": 0.0})
        row["failures"] += 1
        row["gpu_hours_out"] += gpu_seconds_out([(at, g, back)], *window) / HOUR
        if back is not None:
            back_s[cls].append(back - at)
        for w in victims:
            stopped[w, at] = cls
    for iv in result.intervals:
        hit = stopped.get((iv.workload, iv.end)) if iv.outcome == "failed" else None
        if hit is None:
            continue
        seconds = max(0, min(iv.end, window[1]) - max(iv.start, window[0]))
        held = sum(gpu[slices[sid][1]] for pod in iv.pods for sid in pod.slice_ids)
        rows[hit]["gpu_hours_lost"] += held * seconds / HOUR
    out = {}
    for cls, row in sorted(rows.items()):
        times = back_s.get(cls, [])
        out[cls] = {
            "failures": int(row["failures"]),
            "gpu_hours_out": round(row["gpu_hours_out"], 2),
            "gpu_hours_lost": round(row["gpu_hours_lost"], 2),
            "mean_hours_to_return": round(sum(times) / len(times) / HOUR, 2) if times else None,
        }
    every = [t for times in back_s.values() for t in times]
    mean = round(sum(every) / len(every) / HOUR, 2) if every else None
    return {"gpu_failures_by_class": out, "gpu_failure_mean_hours_to_return": mean}


def _nominal_gpus(policy: Policy, q: Queue, gpu: Mapping[FlavorName, float]) -> float:
    """The queue's nominal quota in GPUs: its GPU units', and its flavors' that no unit of
    its covers (a flavor quota beside a unit only caps that flavor)."""
    total = 0.0
    units = [policy.units[x.flavor] for x in q.quotas if x.flavor in policy.units]
    for x in q.quotas:
        unit = policy.units.get(x.flavor)
        if unit is not None:
            total += x.nominal / unit.parts_per_gpu
        elif (f := as_flavor(x.flavor)) in gpu and not any(u.charge(f) for u in units):
            total += x.nominal * gpu[f]
    return total


def _key_use(
    policy: Policy, queue: str, key: QuotaKey, use: Mapping[tuple[str, FlavorName], float]
) -> float:
    """Slice-seconds of a flavor key, or part-seconds of a GPU unit, the queue used."""
    unit = policy.units.get(key)
    if unit is None:
        return use.get((queue, as_flavor(key)), 0.0)
    return sum(use.get((queue, f), 0.0) * cost for f, cost in unit.charges)


def _idle(
    result: SimResult, book: SliceBook, held: Mapping[str, float], window: tuple[int, int]
) -> dict[str, dict[str, float]]:
    """Pool -> cause -> GPU-hours free while work waited (sim/run/idle.py)."""
    start, end = window
    span = max(1, end - start)
    pools_of: defaultdict[str, set[str]] = defaultdict(set)
    node_pool: dict[str, str] = {}
    for sid, (pool, flavor) in book.slices.items():
        pools_of[flavor].add(pool)
        node_pool[sid.split("/", 1)[0]] = pool
    pool_of = {f: "+".join(sorted(ps)) for f, ps in pools_of.items()}
    out_of_service: defaultdict[str, float] = defaultdict(float)
    for at, gpu, back, _ in result.gpu_failures:
        down = node_pool.get(gpu.split("/", 1)[0])
        if down is not None:
            out_of_service[down] += gpu_seconds_out([(at, gpu, back)], start, end)
    free = {
        p: max(0.0, cap * span - held.get(p, 0.0) - out_of_service[p])
        for p, cap in book.pool_gpus.items()
    }
    attributed = idle_gpu_seconds(result.idle, book.gpu, pool_of, start, end)
    return by_cause(attributed, free)


def _total_idle(idle: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    total: defaultdict[str, float] = defaultdict(float)
    for causes in idle.values():
        for cause, hours in causes.items():
            total[cause] += hours
    return {c: round(h, 2) for c, h in sorted(total.items())}


Completion = dict[str, tuple[list[float], list[float], list[float]]]


def completion_times(result: SimResult) -> Completion:
    """Per queue (and "all"): each workload's wait until its last start (a gang evicted and
    started again waited for that start too), its completion time (submission to end) and
    its slowdown (completion time over the time its last run took). Work that never finished
    counts to the end of the run."""
    last_start: dict[str, int] = {}
    for iv in result.intervals:
        if iv.outcome != "incomplete":
            last_start[iv.workload] = max(iv.start, last_start.get(iv.workload, iv.start))
    out: Completion = defaultdict(lambda: ([], [], []))
    for w in result.submitted.values():
        start = last_start.get(w.id, result.end)
        end = result.completed.get(w.id, result.end)
        ran = max(1, end - start)
        for key in (w.queue, "all"):
            waits, completions, slowdowns = out[key]
            waits.append(float(start - w.submit_time))
            completions.append(float(end - w.submit_time))
            slowdowns.append((end - w.submit_time) / ran)
    return out


def completion_figures(completion: Completion, queue: str) -> dict[str, float]:
    waits, completions, slowdowns = completion.get(queue, ([], [], []))
    return {
        "wait_until_last_start_p95_s": percentile(waits, 95),
        "completion_p95_s": percentile(completions, 95),
        "slowdown_p50": round(percentile(slowdowns, 50), 2),
        "slowdown_p95": round(percentile(slowdowns, 95), 2),
    }


def stranded_gpu_seconds(result: SimResult, start: int, end: int) -> dict[str, float]:
    """GPU-seconds stranded per pool over [start, end): each fragmentation sample holds until
    the next one (the last until `end`)."""
    out: defaultdict[str, float] = defaultdict(float)
    samples = result.fragmentation
    for i, (t, per_pool) in enumerate(samples):
        until = samples[i + 1][0] if i + 1 < len(samples) else end
        seconds = max(0, min(until, end) - max(t, start))
        for pool, milli in per_pool.items():
            out[pool] += milli / 1000 * seconds
    return dict(out)


def busy_until(result: SimResult, iv: Interval) -> int:
    """When the run `iv` stopped using its GPUs (the trace's idle model counts from each
    start); its end for work the model never idles."""
    after = result.idle_after.get(iv.workload)
    return iv.end if after is None else min(iv.end, iv.start + after)


def _idle_reclaims(
    result: SimResult, held_idle_s: Mapping[str, float], book: SliceBook
) -> dict[str, Any]:
    """Held-but-idle GPU-hours, and what idleness rules reclaimed: workloads, and the
    GPU-hours of idle holding they would have gone on with (only where the trace models
    idleness)."""
    if not result.idle_after:
        return {}
    return {
        "gpu_hours_held_idle": round(sum(held_idle_s.values()) / HOUR, 2),
        "idle_reclaims": len(result.idle_reclaimed),
        "gpu_hours_idle_reclaimed": round(
            sum(
                left * book.gpu[book.slices[sid][1]]
                for left, pods in result.idle_reclaimed.values()
                for pod in pods
                for sid in pod.slice_ids
            )
            / HOUR,
            2,
        ),
    }


def gpu_seconds(
    result: SimResult, util: Mapping[str, float], start: int, end: int, book: SliceBook
) -> tuple[dict[str, float], dict[str, float]]:
    """GPU-seconds busy and in use per pool over [start, end), the way DCGM reads GPUs.

    Busy: a whole GPU is as busy as its job; a MIG instance adds its job's busy fraction times
    its compute share; jobs time-sharing one GPU add up, capped at fully busy. A job counts
    once per GPU however many replicas it holds there; part-placed gangs keep their GPUs idle.
    In use: what pods hold, in the same units: a whole GPU, or a time-shared GPU with any job
    on it, counts 1; a MIG instance its compute share. Busy over in use is what dashboards
    that read DCGM per pod show, and is at most 1."""
    cluster = book.cluster
    pool_of = {n.name: n.pool for n in cluster.nodes}
    # per GPU: (time, busy delta, MIG share delta, jobs delta)
    events: defaultdict[tuple[str, int], list[tuple[int, float, float, int]]] = defaultdict(list)
    mig: set[tuple[str, int]] = set()
    for iv in result.intervals:
        s, e = max(iv.start, start), min(iv.end, end)
        if e <= s:
            continue
        idle = iv.outcome == "incomplete"
        u = 0.0 if idle else util.get(iv.workload, 60.0) / 100
        # busy until the trace's idle model says its GPUs went idle (then held, not busy)
        b = max(s, min(e, busy_until(result, iv)))
        weight: dict[tuple[str, int], float] = {}
        for pod in iv.pods:
            for sid in pod.slice_ids:
                sl = book.lookup[sid]
                key = (sl.node, sl.gpu)
                if sl.kind is SliceKind.MIG:
                    mig.add(key)
                    weight[key] = weight.get(key, 0.0) + sl.compute_milli / 1000
                else:  # a whole GPU, or this job's share of a time-sliced one: counted once
                    weight[key] = 1.0
        for key, w in weight.items():
            share = w if key in mig else 0.0
            events[key].append((s, u * w, share, 1))
            if b < e:
                events[key].append((b, -u * w, 0.0, 0))
                events[key].append((e, 0.0, -share, -1))
            else:
                events[key].append((e, -u * w, -share, -1))
    busy: defaultdict[str, float] = defaultdict(float)
    in_use: defaultdict[str, float] = defaultdict(float)
    for key, evs in events.items():
        evs.sort()
        pool = pool_of[key[0]]
        level, share, jobs, last = 0.0, 0.0, 0, evs[0][0]
        for t, d_busy, d_share, d_jobs in evs:
            busy[pool] += min(1.0, max(0.0, level)) * (t - last)
            used = share if key in mig else (1.0 if jobs > 0 else 0.0)
            in_use[pool] += min(1.0, max(0.0, used)) * (t - last)
            level += d_busy
            share += d_share
            jobs += d_jobs
            last = t
    return dict(busy), dict(in_use)


def idle_series(
    samples: Sequence[tuple[int, tuple[Idle, ...] | None]],
    gpu_per_slice: Mapping[FlavorName, float],
    times: Sequence[int],
    pool_of: Mapping[str, str] | None = None,
) -> dict[str, dict[str, list[float]]]:
    """GPUs free while work waited, by cause, at each of `times` (the cycle sample in force
    then; nothing-waiting left out): in all (key "all") and, with `pool_of` (flavor -> pool),
    per pool."""
    out: defaultdict[str, defaultdict[str, list[float]]] = defaultdict(
        lambda: defaultdict(lambda: [0.0] * len(times))
    )
    j = -1
    for i, t in enumerate(times):
        while j + 1 < len(samples) and samples[j + 1][0] <= t:
            j += 1
        shares = samples[j][1] if j >= 0 else None
        for share in shares or ():
            if share.cause is IdleCause.NOTHING_WAITING:
                continue
            gpus = share.slices * gpu_per_slice[share.flavor]
            out["all"][share.cause.value][i] += gpus
            if pool_of is not None:
                out[pool_of[share.flavor]][share.cause.value][i] += gpus
    return {
        key: {c: [round(v, 3) for v in series] for c, series in sorted(causes.items())}
        for key, causes in sorted(out.items())
    }


def _pool_of_flavor(book: SliceBook) -> dict[str, str]:
    pools: defaultdict[str, set[str]] = defaultdict(set)
    for pool, flavor in book.slices.values():
        pools[flavor].add(pool)
    return {f: "+".join(sorted(ps)) for f, ps in pools.items()}


def timelines(result: SimResult, window: tuple[int, int], samples: int = 120) -> dict[str, Any]:
    """Series for the report: per pool the allocated share and per queue the GPU-equivalents
    held, at `samples` evenly spaced instants of the window; and every workload's wait."""
    policy = result.policy
    book = slice_book(policy)
    capacity, charge = book.pool_gpus, book.gpu
    slice_info = {sid: (pool, charge[flavor]) for sid, (pool, flavor) in book.slices.items()}
    start, end = window
    step = max(1, (end - start) // samples)
    times = list(range(start, end + 1, step))
    pools: dict[str, list[float]] = {p: [0.0] * len(times) for p in sorted(capacity)}
    queues: dict[str, list[float]] = {q.name: [0.0] * len(times) for q in policy.queues}
    for iv in result.intervals:
        held: defaultdict[str, float] = defaultdict(float)
        for pod in iv.pods:
            for sid in pod.slice_ids:
                pool, gpu = slice_info[sid]
                held[pool] += gpu
        total = sum(held.values())
        first = max(0, -(-(iv.start - start) // step))
        for i in range(first, len(times)):
            t = times[i]
            if t >= iv.end:
                break
            for pool, gpu in held.items():
                pools[pool][i] += gpu
            queues[iv.queue][i] += total
    nominal = {q.name: _nominal_gpus(policy, q, charge) for q in policy.queues}
    waits = sorted(
        (result.first_start.get(w.id, result.end) - w.submit_time)
        for w in result.submitted.values()
    )
    return {
        "times": times,
        "idle_by_cause": idle_series(result.idle, charge, times, _pool_of_flavor(book)),
        "pool_allocation": {
            p: [round(v / capacity[p], 4) for v in series] for p, series in pools.items()
        },
        "queue_gpus": {q: [round(v, 3) for v in series] for q, series in queues.items()},
        "queue_nominal_gpus": {q: round(v, 3) for q, v in nominal.items()},
        "waits": waits,
    }
