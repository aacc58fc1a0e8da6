"""What must hold after every cycle, as a check drivers run (not only tests).

`step_violations(before, result, after)` lists, in words, every broken rule: a slice held
twice or by the wrong pod, shared memory beyond a GPU's, a queue beyond its nominal quota plus
borrowing limit, a cohort lending more than its members own, a gang admitted with fewer pods
than its minimum, an eviction of work that is not preemptible, too young, or not the victim
the rule allows (same queue and lower priority for preemption; another queue of the cohort
that borrows, for reclaim; restartable work of no higher priority, for a gang placed in the
same cycle, for consolidation). `gpucarve simulate --check-invariants` and the scheduler's debug
mode call it after each cycle and stop at the first violation.
"""

from __future__ import annotations

from collections import Counter

from gpucarve.core.amounts import Bound, FlavorName, QuotaKey
from gpucarve.core.cohort_tree import cohort_tree
from gpucarve.core.policy import Policy, Queue
from gpucarve.core.snapshot import Snapshot
from gpucarve.engine.decisions import Cause, CycleResult, Plugin
from gpucarve.engine.gang_timeout import timeout_of


class InvariantViolation(RuntimeError):
    """The engine or a driver broke a rule it must keep: a bug, never the user's input."""


def _usage(s: Snapshot) -> Counter[tuple[str, FlavorName]]:
    usage: Counter[tuple[str, FlavorName]] = Counter()
    for rw in s.running:
        for pod in rw.pods:
            if pod.flavor:
                usage[(rw.workload.queue, pod.flavor)] += len(pod.slice_ids)
    return usage


def _key_used(p: Policy, q: Queue, key: QuotaKey, usage: Counter[tuple[str, FlavorName]]) -> int:
    """What queue `q` holds of a quota key: slices of a flavor, or parts of a GPU unit."""
    unit = p.units.get(key)
    if unit is None:
        return usage[(q.name, FlavorName(key))]  # a flavor's own key
    return sum(usage[(q.name, f)] * cost for f, cost in unit.charges)


def _quota(p: Policy, after: Snapshot) -> list[str]:
    out: list[str] = []
    usage = _usage(after)
    lent: Counter[tuple[str, QuotaKey]] = Counter()
    lendable: Counter[tuple[str, QuotaKey]] = Counter()
    for q in p.queues:
        for quota in q.quotas:
            used = _key_used(p, q, quota.flavor, usage)
            can_lend = quota.lendable
            if q.cohort is None:
                if used > quota.nominal:
                    out.append(
                        f"queue {q.name} uses {used} {quota.flavor}, nominal {quota.nominal}"
                    )
                continue
            limit = quota.borrowing_limit
            if limit.plus(quota.nominal).exceeded_by(used):
                out.append(
                    f"queue {q.name} uses {used} {quota.flavor}, beyond nominal "
                    f"{quota.nominal} + borrowing limit {limit.text()}"
                )
            lent[(q.cohort, quota.flavor)] += max(0, used - (quota.nominal - can_lend))
            lendable[(q.cohort, quota.flavor)] += can_lend
    if p.nested:
        return out + _tree(p, usage)
    for (cohort, flavor), used in sorted(lent.items()):
        if used > lendable[(cohort, flavor)]:
            out.append(
                f"cohort {cohort} lends {used} {flavor}, its queues lend only "
                f"{lendable[(cohort, flavor)]}"
            )
    return out


def _tree(p: Policy, usage: Counter[tuple[str, FlavorName]]) -> list[str]:
    """In a cohort tree, worked out here apart from the engine's quota arithmetic: per key, a
    cohort's members draw no more than it holds plus what it borrows within its limit, and a
    root no more than it holds."""
    tree = cohort_tree(p)
    drawn: Counter[tuple[str, QuotaKey]] = Counter()
    for q in p.queues:
        for quota in q.quotas:
            if q.cohort is not None:
                used = _key_used(p, q, quota.flavor, usage)
                drawn[(q.cohort, quota.flavor)] += max(0, used - (quota.nominal - quota.lendable))
    out: list[str] = []
    for c in sorted(p.cohorts, key=lambda c: (-len(tree.path(c.name)), c.name)):
        for (name, key), lvl in sorted(tree.levels.items()):
            if name != c.name:
                continue
            used = drawn[(name, key)]
            most = Bound(lvl.subtree) if c.parent is None else lvl.borrowing_limit.plus(lvl.subtree)
            if most.exceeded_by(used):
                out.append(f"cohort {name} lends {used} {key}, it holds {lvl.subtree}")
            if c.parent is not None:
                drawn[(c.parent, key)] += max(0, used - lvl.guaranteed)
    return out


def _one_tree(p: Policy, a: Queue, b: Queue) -> bool:
    """Whether two queues share a cohort (flat), or a root cohort (a tree)."""
    if not p.nested:
        return a.cohort == b.cohort
    tree = cohort_tree(p)
    return tree.path(a.cohort)[-1:] == tree.path(b.cohort)[-1:]


def _gangs(before: Snapshot, result: CycleResult) -> list[str]:
    if not before.policy.scheduling.gang:
        return []  # without gangs, pods are placed one by one on purpose (baselines)
    out: list[str] = []
    pending = {w.id: w for w in before.pending}
    running = {rw.workload.id: rw for rw in before.running}
    for adm in result.admissions:
        w = pending.get(adm.workload)
        grown = running.get(adm.workload)
        if w is None and grown is not None:
            # an elastic gang grows: it was whole, it stays within its size
            per = Counter(p.pod_set for p in (*grown.pods, *adm.pods))
            have = Counter(p.pod_set for p in grown.pods)
            for ps in grown.workload.pod_sets:
                if have[ps.name] < ps.min_count or per[ps.name] > ps.count:
                    out.append(f"{adm.workload} grown to {per[ps.name]} pods of {ps.name}")
            continue
        if w is None:
            out.append(f"{adm.workload} admitted but it was not pending")
            continue
        per = Counter(pod.pod_set for pod in adm.pods)
        for ps in w.pod_sets:
            if not ps.min_count <= per[ps.name] <= ps.count:
                out.append(
                    f"{w.id} admitted with {per[ps.name]} pods of {ps.name}, "
                    f"needs {ps.min_count}..{ps.count}"
                )
    return out


def _borrowed_when_evicted(
    before: Snapshot, result: CycleResult, queue: str, flavors: set[FlavorName], by: str
) -> bool:
    """Did `queue` use more than its nominal quota of one of `flavors` when the admission of
    `by` reclaimed from it? Its usage before the cycle plus what the cycle admitted for it
    before that admission."""
    q = before.policy.queue(queue)
    usage = _usage(before)
    at = next((i for i, a in enumerate(result.admissions) if a.workload == by), 0)
    for a in result.admissions[:at]:
        if a.queue == queue:
            for f, n in a.charged:
                usage[(queue, f)] += n
    keys = {k for f in flavors for k, _ in before.policy.quota_keys(q, f)}
    nominal = {x.flavor: x.nominal for x in q.quotas}
    return any(_key_used(before.policy, q, k, usage) > nominal[k] for k in keys)


def _evictions(before: Snapshot, result: CycleResult) -> list[str]:
    p = before.policy
    out: list[str] = []
    was_running = {rw.workload.id: rw for rw in before.running}
    by_id = {w.id: w for w in before.pending}
    by_id.update((k, rw.workload) for k, rw in was_running.items())
    for ev in result.evictions:
        victim = was_running.get(ev.workload)
        winner = by_id.get(ev.by)
        if victim is None or winner is None:
            out.append(f"eviction of {ev.workload} by {ev.by}: one of them is unknown")
            continue
        w = victim.workload
        if ev.pods:
            going = set(ev.pods)
            left = Counter(p.pod_set for p in victim.pods if p.pod not in going)
            if not going <= {p.pod for p in victim.pods} or any(
                left[ps.name] < ps.min_count for ps in w.pod_sets
            ):
                out.append(f"{w.id} shrunk below its minimum or by pods it does not run")
        if ev.cause is Cause.TIMEOUT:
            part = before.partial.get(w.id)
            limit = None if part is None else timeout_of(w, part.gpus)
            if part is None or limit is None or result.now - part.since < limit:
                out.append(f"{w.id} released for a timeout it has not reached")
            continue
        if not w.preemptible:
            out.append(f"{w.id} evicted but it is not preemptible")
        if result.now - victim.start_time < p.scheduling.min_runtime_s:
            out.append(f"{w.id} evicted after {result.now - victim.start_time} s, too young")
        if ev.cause is Cause.CONSOLIDATE:
            moved = any(a.workload == winner.id for a in result.admissions)
            if not w.restartable or winner.priority < w.priority or not moved:
                out.append(f"{w.id} moved for {winner.id}, which it may not be or was not placed")
            continue
        if ev.cause is Cause.PREEMPT:
            if winner.queue != w.queue or winner.priority <= w.priority:
                out.append(f"{w.id} preempted by {winner.id}, not a higher priority of its queue")
            continue
        vq, wq = p.queue(w.queue), p.queue(winner.queue)
        if winner.queue == w.queue or vq.cohort is None or not _one_tree(p, vq, wq):
            out.append(f"{w.id} reclaimed by {winner.id}, not another queue of its cohort")
            continue
        flavors = {pod.flavor for pod in victim.pods if pod.flavor}
        withdrawn = any(
            pd.workload.startswith(vq.name + "/") and pd.reason.plugin is Plugin.RECLAIM
            for pd in result.pending
        )  # an admission of that queue that reclaim later withdrew is not in the result
        if not withdrawn and not _borrowed_when_evicted(before, result, vq.name, flavors, ev.by):
            out.append(f"{w.id} reclaimed by {winner.id} although {vq.name} did not borrow")
    return out


def step_violations(before: Snapshot, result: CycleResult, after: Snapshot) -> list[str]:
    """Every rule the cycle from `before` to `after` broke; empty when all hold."""
    return [
        *after.check(),
        *_quota(before.policy, after),
        *_gangs(before, result),
        *_evictions(before, result),
    ]


def check_step(before: Snapshot, result: CycleResult, after: Snapshot) -> None:
    """Raise `InvariantViolation` naming the time and every broken rule."""
    broken = step_violations(before, result, after)
    if broken:
        shown = "; ".join(broken[:5]) + (f"; and {len(broken) - 5} more" if len(broken) > 5 else "")
        raise InvariantViolation(f"cycle at t={result.now}: {shown}")
