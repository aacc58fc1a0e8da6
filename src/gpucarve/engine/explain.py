"""Why a workload waits, as a chain a user can act on: its queue's quota and usage, its place
in fair-share order, the decision with the stage and plugin that made it (and the nodes each
filter refused), and what would let it run. Built from the same snapshot and cycle result the
scheduler acts on (`gpucarve explain` on a cluster, `gpucarve plan --explain` on a file), so
both say the same.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from gpucarve.core.amounts import Bound, Demand, FlavorName, QuotaKey
from gpucarve.core.cluster import OUT_OF_SERVICE
from gpucarve.core.policy import Flavor, GpuUnit, SliceKind
from gpucarve.core.requests import candidate_flavors, gpu_memory_of, slices_per_pod
from gpucarve.core.runtime import WHENCE
from gpucarve.core.snapshot import Snapshot
from gpucarve.core.workload import RunningWorkload, Workload
from gpucarve.engine.apply import apply
from gpucarve.engine.ceilings import selected_flavors
from gpucarve.engine.decisions import Admission, CycleResult, PendingReason, Stage
from gpucarve.engine.gang_timeout import gang_gpus, timeout_of
from gpucarve.engine.quota import SCALE, Quotas
from gpucarve.engine.usage import usage_after


@dataclass(frozen=True, slots=True)
class QuotaLine:
    flavor: QuotaKey  # a flavor (slices), or a GPU unit (parts of a GPU)
    nominal: int
    borrowing_limit: Bound
    used: int
    borrowed: int
    needs: int  # what the workload asks of this key (its first choice), 0 if none
    cohort_free: int | None  # what the cohort can still lend; None without a cohort
    unit: GpuUnit | None = None

    def amount(self, n: int | Bound | None) -> str:
        fmt = str if self.unit is None else self.unit.gpus_text
        if isinstance(n, Bound):
            return n.text(fmt)
        return "-" if n is None else fmt(n)


@dataclass(frozen=True)
class Explanation:
    workload: str
    queue: str
    cohort: str | None
    state: str  # pending | admitted | running | unknown
    pods: int
    min_pods: int
    topology: str
    timeout_s: int | None
    reason: PendingReason | None = None
    tried: tuple[PendingReason, ...] = ()
    admission: Admission | None = None
    quota: tuple[QuotaLine, ...] = ()
    fair_share: str = ""
    hints: tuple[str, ...] = field(default_factory=tuple)
    # the free slices of its flavors after the cycle and why they sit idle (engine.idle)
    idle: tuple[str, ...] = ()
    # how long it is expected to run and whence (core.runtime): what reservations and reclaim
    # grace weigh
    runtime: str = ""


def _usable(snapshot: Snapshot, w: Workload) -> list[list[Flavor]]:
    """Per pod set, the flavors the workload could run on: its queue has quota for them, they
    serve its request, and its node selection matches their nodes (preferred first)."""
    policy = snapshot.policy
    quotas = Quotas(policy, {})
    out = []
    for ps in w.pod_sets:
        served = [f for f in candidate_flavors(policy, ps.gpu) if quotas.has_quota(w.queue, f.name)]
        out.append(selected_flavors(snapshot, ps, served))
    return out


def _demand(snapshot: Snapshot, w: Workload) -> Demand:
    """Slices per flavor of the workload's first flavor choices (what its minimum needs)."""
    policy = snapshot.policy
    out: Counter[FlavorName] = Counter()
    for ps, usable in zip(w.pod_sets, _usable(snapshot, w), strict=True):
        for f in usable[:1]:
            memory = next(p.model.memory_mib for p in policy.pools if p.model.id == f.model_id)
            out[f.name] += slices_per_pod(ps.gpu, f, memory) * ps.min_count
    return dict(out)


def _note_waiting(
    snapshot: Snapshot, result: CycleResult, quotas: Quotas, pending: dict[str, Workload]
) -> None:
    """What the work still waiting after the cycle keeps from loans, as the next cycle counts
    it (scheduling.loansWaitForLenders; engine.state.CycleState.note_waiting)."""
    for p in result.pending:
        pw = pending.get(p.workload)
        if pw is None or p.reason.stage is Stage.VALIDATION:  # never admitted: keeps nothing
            continue
        d = _demand(snapshot, pw)
        if d and quotas.within_nominal(pw.queue, d):
            quotas.note_waiting(pw.queue, d)


def _runtime(snapshot: Snapshot, w: Workload) -> str:
    seconds, whence = snapshot.runtimes.expected(w, snapshot.policy.scheduling.default_runtime_s)
    return f"{seconds} s, by {WHENCE[whence]}"


def _fair_share(snapshot: Snapshot, quotas: Quotas, queue: str, now: int) -> str:
    half_life = snapshot.policy.scheduling.usage_half_life_s
    recent = snapshot.usage.at(now, half_life) if half_life else {}
    waiting = sorted({w.queue for w in snapshot.pending} | {queue})
    order = sorted(waiting, key=lambda q: (quotas.fair_share(q, recent.get(q, 0)), q))
    share = quotas.borrowed_share(queue) / (SCALE * SCALE)
    weight = quotas.queues[queue].weight_milli / 1000
    past = ""
    if half_life:
        past = (
            f" plus {recent.get(queue, 0) / (SCALE * SCALE):.3f} borrowed recently "
            f"(half-life {half_life}s, scheduling.usageHalfLifeSeconds)"
        )
    return (
        f"borrowed share {share:.3f}{past} over weight {weight:g}: turn "
        f"{order.index(queue) + 1} of {len(order)} queues with work waiting (lowest share first)"
    )


def explain(snapshot: Snapshot, result: CycleResult, workload: str) -> Explanation | None:
    """The explanation of `workload` (pending or running in `snapshot`); None if unknown."""
    pending = {w.id: w for w in snapshot.pending}
    running = {rw.workload.id: rw for rw in snapshot.running}
    w = pending.get(workload) or (running[workload].workload if workload in running else None)
    if w is None:
        return None
    policy = snapshot.policy
    # quota and fair share as they stand once the cycle's decisions are applied: the
    # admissions made before this workload's turn took their share
    after = apply(snapshot, result)
    quotas = Quotas(policy, dict(usage_after(snapshot.running, result)))
    if policy.scheduling.loans_wait_for_lenders:
        _note_waiting(snapshot, result, quotas, pending)
    queue = policy.queue(w.queue)
    demand = _demand(snapshot, w)
    charged = quotas.charge(w.queue, demand)
    keys = {
        k for fs in _usable(snapshot, w) for f in fs for k, _ in policy.quota_keys(queue, f.name)
    }
    lines = []
    for q in queue.quotas:
        if keys and q.flavor not in keys:
            continue  # quota for flavors its request or node selection rules out
        free = None
        if queue.cohort is not None:
            if quotas.tree is not None:  # a cohort tree: what its levels let it draw
                free = max(0, quotas.room(queue.cohort, q.flavor)[0])
            else:
                pool = quotas.pool.get((queue.cohort, q.flavor), 0)
                free = max(0, pool - quotas.pool_used(queue.cohort, q.flavor))
        used = quotas.used(w.queue, q.flavor)
        lines.append(
            QuotaLine(q.flavor, q.nominal, q.borrowing_limit, used,
                      quotas.borrowed(w.queue, q.flavor), charged.get(q.flavor, 0), free,
                      policy.units.get(q.flavor))
        )  # fmt: skip
    admission = next((a for a in result.admissions if a.workload == workload), None)
    pend = next((p for p in result.pending if p.workload == workload), None)
    state = "running" if workload in running else "admitted" if admission else "pending"
    explanation = Explanation(
        workload=w.id,
        queue=w.queue,
        cohort=queue.cohort,
        state=state if pend is not None or state != "pending" else "unknown",
        pods=w.pods,
        min_pods=sum(ps.min_count for ps in w.pod_sets),
        topology=str(w.topology),
        timeout_s=timeout_of(w, gang_gpus(w)) if w.pods > 1 else None,
        reason=None if pend is None else pend.reason,
        tried=() if pend is None else pend.tried,
        admission=admission,
        quota=tuple(lines),
        fair_share=_fair_share(snapshot, quotas, w.queue, result.now),
        idle=_idle(result, w.id, demand) if pend is not None else (),
        runtime=_runtime(snapshot, w),
    )
    hints = _hints(after, result, explanation, w, quotas, demand)
    return Explanation(**{**explanation.__dict__, "hints": tuple(hints)})


def _hints(
    snapshot: Snapshot,
    result: CycleResult,
    e: Explanation,
    w: Workload,
    quotas: Quotas,
    demand: Demand,
) -> list[str]:
    if e.admission is not None:
        nodes = sorted({p.node for p in e.admission.pods})
        said = [f"admitted this cycle: {len(e.admission.pods)} pods on {', '.join(nodes)}"]
        if e.admission.after_evictions:
            said.append(f"its pods start once {', '.join(e.admission.after_evictions)} exit")
        return said
    if e.reason is None:
        if e.state != "running":
            return ["nothing decided for it this cycle"]
        held = next((h for h in result.held_idle if h.workload == w.id), None)
        return ["running"] if held is None else ["running", held.message]
    stage = e.reason.stage
    if stage is Stage.VALIDATION:
        return ["never under this policy as it is: change the request or the policy"]
    if stage is Stage.QUEUEING:
        return ["it goes once the workload ahead of it is admitted (or raise its priority)"]
    if stage is Stage.PREEMPTION:
        return [f"preemption: {e.reason.message}"]
    out: list[str] = []
    # a quota reason names the quota key it is short in, a placement reason the flavor
    first = e.reason.flavor or next(iter(sorted(demand)), None)
    if stage is Stage.QUOTA and first is not None:
        key = QuotaKey(first)
        need = quotas.charge(w.queue, demand).get(key, 0)
        out += _quota_hints(snapshot, w, quotas, key, need, result.now)
    if stage is Stage.PLACEMENT and first is not None:
        flavor = FlavorName(first)
        out += _placement_hints(snapshot, w, flavor, demand.get(flavor, 0))
    out += _idle_holders(snapshot, result, demand)
    return out or [str(e.reason)]


def _idle_holders(snapshot: Snapshot, result: CycleResult, demand: Demand) -> list[str]:
    """Running work that holds the flavors it needs idle, and when it may be reclaimed."""
    if not result.held_idle:
        return []
    running = {rw.workload.id: rw for rw in snapshot.running}
    out = []
    for h in result.held_idle:
        rw = running.get(h.workload)
        if rw is not None and any(p.flavor in demand for p in rw.pods):
            out.append(f"{h.workload} holds GPUs it needs: {h.message}")
    return out


def _idle(result: CycleResult, workload: str, demand: Demand) -> tuple[str, ...]:
    """What is free of the flavors it asks for, and why that sits idle while it waits."""
    out = []
    for share in result.idle:
        if share.flavor not in demand:
            continue
        line = f"{share.slices} {share.flavor} free: {share.cause}"
        if share.workload == workload:
            line += " (this workload's reason: it is the first waiting that could use them)"
        elif share.workload:
            line += f" (the reason of {share.workload}, the first waiting that could use them)"
        out.append(line)
    return tuple(out)


def _quota_hints(
    snapshot: Snapshot, w: Workload, quotas: Quotas, flavor: QuotaKey, need: int, now: int
) -> list[str]:
    """`flavor` is the quota key the demand ran into (a flavor, or a GPU unit)."""
    queue = snapshot.policy.queue(w.queue)
    st = quotas.standing(w.queue, flavor, need)
    n = st.amount
    what = flavor if st.unit is None else f"{flavor} GPUs"
    out: list[str] = []
    if st.reclaimable or (st.borrow <= 0 and queue.cohort is not None):
        for rw in sorted(snapshot.running, key=lambda r: (r.start_time, r.workload.id)):
            other = rw.workload
            if other.queue == w.queue or not other.preemptible:
                continue
            if other.queue not in quotas.tree_queues(w.queue):
                continue
            if quotas.loan(w.queue, other.queue, flavor) <= 0:
                continue
            if not quotas.may_reclaim_in(w.queue, other.queue, flavor, need):
                continue
            held = quotas.held(other.queue, rw.pods, flavor)
            if held:
                out.append(
                    f"reclaim {n(held)} {what} from queue {other.queue} ({other.id}, borrowing): "
                    + _reclaim_when(snapshot, w, rw, need, now)
                )
        out = out[:5] or [f"wait for queue {w.queue}'s own {what} to be given back"]
        if queue.cohort is not None and st.short_in_cohort:
            out += _levels(quotas, queue.cohort, flavor, n)
        return out
    own = [quotas.held(w.queue, rw.pods, flavor)
           for rw in snapshot.running if rw.workload.queue == w.queue]  # fmt: skip
    holding = [h for h in own if h]
    out.append(f"queue {w.queue} holds {n(sum(holding))} {what} in {len(holding)} running "
               "workloads")  # fmt: skip
    if st.over_borrowing_limit:
        most = st.borrowing_limit.plus(st.nominal).or_int()
        out.append(
            f"its borrowing limit lets it hold {n(most)}: {n(st.used + need - most)} "
            f"of its own {what} must be given back first, or raise borrowingLimit"
        )
    if queue.cohort is not None and st.borrow > 0 and st.withheld:
        out.append(
            f"queue {', '.join(st.withheld_for)} keeps {n(st.withheld)} {what} of its "
            "unused nominal quota from loans while its own work waits for it "
            "(scheduling.loansWaitForLenders): the loan waits until that work starts"
        )
    if queue.cohort is not None and st.short_in_cohort:
        # admission's own comparison: what the demand draws from the cohort's pool against
        # what the pool has free (never the total borrowed after admission); a pool a policy
        # change left overdrawn (negative room) needs that much more back too
        out.append(
            f"it draws {n(st.pool_draw)} more {what} from cohort {queue.cohort}, which lends "
            f"{n(st.cohort_lends)} now: {n(st.pool_draw - st.pool_room)} more must be "
            "given back in the cohort (work of its queues finishing), or raise nominal quota"
        )
        out += _levels(quotas, queue.cohort, flavor, n)
    if queue.cohort is None:
        out.append(f"it is in no cohort: raise its nominal {what} or wait for its own work")
    return out


def _levels(quotas: Quotas, cohort: str, key: QuotaKey, n: Callable[[int], str]) -> list[str]:
    """In a cohort tree, the chain of levels a loan is drawn through, nearest first."""
    if quotas.tree is None:
        return []
    return [
        "levels: "
        + "; ".join(
            f"cohort {name} holds {n(holds)}, its members draw {n(used)}, "
            f"{n(max(0, room))} more may be drawn"
            for name, holds, used, room in quotas.levels(cohort, key)
        )
    ]


def _reclaim_when(snapshot: Snapshot, w: Workload, rw: RunningWorkload, need: int, now: int) -> str:
    """When reclaiming from `rw` becomes possible for `w`, in seconds from now: its minimum
    runtime, and reclaim sparing a gang many times `w`'s size (scheduling)."""
    cfg = snapshot.policy.scheduling
    waits = []
    ran = rw.start_time + cfg.min_runtime_s - now
    if ran > 0:
        waits.append(f"in {ran} s, once it has run its minimum runtime of {cfg.min_runtime_s} s")
    size = sum(len(p.slice_ids) for p in rw.pods)
    ratio, after = cfg.reclaim_large_ratio, cfg.reclaim_large_after_s
    setting = "reclaimLargeVictimAfterSeconds"
    queue = next((q for q in snapshot.policy.queues if q.name == w.queue), None)
    bound = None if queue is None else queue.reclaim_wait_s
    if bound is not None and bound < after:
        after, setting = bound, f"queue {w.queue}'s reclaimWaitSeconds"
    if ratio is not None and size > ratio * max(1, need) and now - w.submit_time < after:
        left = after - (now - w.submit_time)
        waits.append(
            f"in {left} s: it holds {size} slices, more than {ratio} times the {max(1, need)} "
            "this workload needs, so reclaim spares it until this workload has waited "
            f"{after} s (scheduling.reclaimLargeVictimRatio, {setting})"
        )
    if not waits:
        return f"possible now (it has run its minimum runtime of {cfg.min_runtime_s} s)"
    return "possible " + "; and ".join(waits)


def _placement_hints(snapshot: Snapshot, w: Workload, flavor: FlavorName, need: int) -> list[str]:
    free_by_node: Counter[str] = Counter()
    allocated = snapshot.cluster.allocations
    for sid, sl in snapshot.cluster.slices.items():
        if sl.flavor == flavor and sid not in allocated:
            free_by_node[sl.node] += 1
    total = sum(free_by_node.values())
    most = max(free_by_node.values(), default=0)
    out = [
        f"{total} {flavor} free in the cluster (at most {most} on one node); the gang needs "
        f"{need}: it runs once {max(0, need - total)} more are free in the shape it needs"
    ]
    out += _out_of_service(snapshot, flavor)
    per_pod = _largest_pod(snapshot, w, flavor)
    if per_pod > most:
        # a pod's slices of a whole GPU or MIG flavor are on one node: the best node decides
        out[0] = (
            f"{total} {flavor} free in the cluster, at most {most} on one node; its largest pod "
            f"needs {per_pod} on one node: it runs once {per_pod - most} more are free on one "
            "node (work there finishing)"
        )
    return out


def _out_of_service(snapshot: Snapshot, flavor: FlavorName) -> list[str]:
    """A line on the GPUs of `flavor` out of service for a fault, where there are any."""
    slices = snapshot.cluster.slices
    gpus = sorted({
        a.owner.removeprefix(OUT_OF_SERVICE)
        for sid, a in snapshot.cluster.allocations.items()
        if a.owner.startswith(OUT_OF_SERVICE) and sid in slices and slices[sid].flavor == flavor
    })  # fmt: skip
    if not gpus:
        return []
    shown = ", ".join(gpus[:5]) + (f" and {len(gpus) - 5} more" if len(gpus) > 5 else "")
    return [
        f"{len(gpus)} GPU(s) with {flavor} out of service for a fault ({shown}): their free "
        "slices take work again once their node agent finds them healthy"
    ]


def _largest_pod(snapshot: Snapshot, w: Workload, flavor: FlavorName) -> int:
    """The most slices of `flavor` one pod of `w` takes on one node (0 for a shared flavor,
    whose replicas come from one GPU, or none of its pod sets on that flavor)."""
    policy = snapshot.policy
    f = policy.flavors.get(flavor)
    if f is None or f.kind in (SliceKind.TIME_SLICE, SliceKind.MPS):
        return 0
    sizes = [
        slices_per_pod(ps.gpu, f, gpu_memory_of(policy, f))
        for ps in w.pod_sets
        if any(c.name == flavor for c in candidate_flavors(policy, ps.gpu))
    ]
    return max(sizes, default=0)


def render(e: Explanation) -> list[str]:
    """The explanation as plain lines (the CLI prints them; tests read them)."""
    gang = f"{e.pods} pod{'s' if e.pods != 1 else ''}"
    if e.min_pods != e.pods:
        gang += f" (at least {e.min_pods} at once)"
    elif e.pods > 1:
        gang += " (all at once)"
    if e.topology != "none":
        gang += f", all in one {e.topology}"
    if e.timeout_s is not None:
        gang += f", released if short of pods for {e.timeout_s} s"
    out = [f"workload {e.workload}: {gang}; {e.state}"]
    out.append(
        f"queue {e.queue}" + (f" (cohort {e.cohort})" if e.cohort else "") + f": {e.fair_share}"
    )
    if e.runtime:
        out.append(f"expected to run {e.runtime}")
    rows = [("flavor", "nominal", "borrowing-limit", "used", "borrowed", "needs", "cohort-lends")]
    for q in e.quota:
        name = q.flavor if q.unit is None else f"{q.flavor} (GPUs)"
        numbers = (q.nominal, q.borrowing_limit, q.used, q.borrowed, q.needs, q.cohort_free)
        a, b, c, d, e_, f = (q.amount(n) for n in numbers)
        rows.append((name, a, b, c, d, e_, f))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        out.append("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    if e.reason is not None:
        out.append(f"decision: {e.reason}")
        out += [f"  also tried: {t}" for t in e.tried if t != e.reason]
    if e.idle:
        out.append("free while it waits:")
        out += [f"  - {line}" for line in e.idle]
    out.append("what would let it run:" if e.state == "pending" else "now:")
    out += [f"  - {h}" for h in e.hints]
    return out
