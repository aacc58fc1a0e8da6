"""Admission of one workload: its flavors, quota (nominal, then borrowing through the
cohort), the gang's placement under a checkpoint, then, least disruptive first, MIG instances a
repartition creates this cycle, then preemption and reclaim (`evict`).

Within a cycle capacity only shrinks until something is given back, so a workload of the same
shape, queue and priority as one that just failed fails the same way: `admit` remembers
failures per release epoch.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence

from gpucarve.core.amounts import Demand, FlavorName
from gpucarve.core.policy import Flavor
from gpucarve.core.workload import PodAssignment, Workload
from gpucarve.engine import evict, podwise
from gpucarve.engine.decisions import Outcome, PendingReason, Plugin, Stage
from gpucarve.engine.placement.flavor_rank import rank_combos
from gpucarve.engine.placement.plan_keys import Plan, best_reason, signature
from gpucarve.engine.repartition import Reshaper
from gpucarve.engine.state import CycleState

MAX_FLAVOR_COMBOS = 16


def admit(c: CycleState, w: Workload, reshaper: Reshaper) -> Outcome:
    # Within a cycle capacity only shrinks until something is given back, so a workload
    # of the same shape, queue and priority as one that just failed fails the same way.
    # (Not while a starving head holds flavors: that depends on submit times.)
    key = None if c.placer.reserved else (w.queue, w.priority, w.topology, w.pod_sets)
    if key is not None:
        cached = c.memos.failed(key, c.ws.release_epoch)
        if cached is not None:
            return cached
    outcome = _try(c, w, reshaper)
    # (A promise of new MIG instances counts each workload's own pods: never reused.)
    reason = outcome.reason
    promise = reason is not None and reason.plugin is Plugin.MIG_REPARTITION
    if key is not None and not outcome.admitted and not promise:
        c.memos.fail(key, c.ws.release_epoch, outcome)
    return outcome


def _combos(per_set: list[list[Flavor]]) -> list[tuple[Flavor | None, ...]]:
    choices: list[list[Flavor | None]] = [list(f) if f else [None] for f in per_set]
    return list(itertools.islice(itertools.product(*choices), MAX_FLAVOR_COMBOS))


def never_fits(c: CycleState, w: Workload) -> tuple[PendingReason, ...]:
    """Why `w` can never run under this policy on this cluster, whatever frees up (empty:
    it may): no flavor its queue has quota for serves a pod set, or every choice of flavors
    passes a ceiling (`ceilings`). The webhook asks the same at admission."""
    per_set = c.flavors_for(w)
    unserved = _unserved(w, per_set)
    if unserved is not None:
        return (unserved,)
    found = _ceilings(c, w, _combos(per_set))
    return tuple(r for r in found if r is not None) if all(found) else ()


def _unserved(w: Workload, per_set: list[list[Flavor]]) -> PendingReason | None:
    for ps, flavors in zip(w.pod_sets, per_set, strict=True):
        if ps.gpu.kind.value != "none" and not flavors:
            return PendingReason(
                Stage.VALIDATION,
                Plugin.FLAVOR,
                f"can never be admitted: queue {w.queue} has no quota for a flavor that "
                f"serves {ps.gpu.describe()} (pod set {ps.name})",
            )
    return None


def _ceilings(
    c: CycleState, w: Workload, combos: list[tuple[Flavor | None, ...]]
) -> list[PendingReason | None]:
    return [c.ceilings.never_fits(w, combo) for combo in combos]


def _preferred_first(
    c: CycleState, w: Workload, combos: list[tuple[Flavor | None, ...]]
) -> list[tuple[Flavor | None, ...]]:
    """The flavor choices whose nodes the workload's preferred node affinity weighs most come
    first (in their order otherwise): a preference for another model's nodes is not lost to
    packing on the model tried first."""
    if len(combos) < 2 or not any(ps.preferred for ps in w.pod_sets):
        return combos

    def weight(combo: tuple[Flavor | None, ...]) -> int:
        return sum(c.ceilings.preference(ps, f.name)
                   for ps, f in zip(w.pod_sets, combo, strict=True) if f is not None)  # fmt: skip

    return sorted(combos, key=lambda combo: -weight(combo))


def _try(c: CycleState, w: Workload, reshaper: Reshaper) -> Outcome:
    if not c.cfg.gang:
        return podwise.place_pods_alone(c, w, Counter(), ())
    per_set = c.flavors_for(w)
    unserved = _unserved(w, per_set)
    if unserved is not None:
        return Outcome(False, unserved)
    combos = _combos(per_set)
    impossible = _ceilings(c, w, combos)
    if all(r is not None for r in impossible):
        # Not even an empty cluster with all the quota the queue can reach would hold it:
        # say so, and never let it hold its queue.
        first = impossible[0]
        assert first is not None
        return Outcome(False, first, tuple(r for r in impossible if r is not None))
    combos = [combo for combo, r in zip(combos, impossible, strict=True) if r is None]
    if c.placer.weighs_batch() and len(combos) > 1:
        plans = [plan_for(c, w, combo)[0] for combo in combos]
        combos = rank_combos(combos, c.placer.preview(w, plans))
    combos = _preferred_first(c, w, combos)
    tried: list[PendingReason] = []
    unplaced: list[Sequence[Flavor | None]] = []
    for combo in combos:
        plan, _, reason = plan_for(c, w, combo)
        if reason is not None:
            tried.append(reason)
            continue
        assert plan is not None
        placed, reason = _place(c, w, plan)
        if placed is not None:
            c.record(w, placed, Stage.QUOTA)
            return Outcome(True)
        assert reason is not None
        tried.append(reason)
        unplaced.append(combo)
    if c.cfg.preemption and unplaced:
        # Least disruptive first: MIG instances a repartition creates this cycle come
        # before evicting anyone.
        waiting = reshaper.absorbs(w, unplaced)
        if waiting is not None:
            return Outcome(False, waiting, (waiting, *tried))
    demands: list[Demand] = []
    if c.cfg.preemption:
        for combo in combos:
            full_plan, demand, _ = plan_for(c, w, combo, ignore_quota=True)
            if full_plan is not None and evict.preempt(c, w, full_plan, demand):
                return Outcome(True)
            if full_plan is not None:
                demands.append(demand)
    reason = _preemption_waits(c, w, demands)
    if reason is not None:
        return Outcome(False, reason, (reason, *tried))
    return Outcome(False, best_reason(tried), tuple(tried))


def _preemption_waits(
    c: CycleState, w: Workload, demands: Sequence[Demand]
) -> PendingReason | None:
    """Why eviction has not made room for `w` yet, when only time stands in its way: reclaim
    waits for borrowed work about to end, spares a large gang, or the lower-priority work it
    would preempt has not run its minimum runtime (`demands`: what it needs, per choice of
    flavors that quota ignored would place)."""
    waits = c.holds.reclaim_put_off(w.id)
    if waits is not None:
        return PendingReason(Stage.PREEMPTION, Plugin.RECLAIM_GRACE, waits)
    spared = c.preemptor.spared.get(w.id)
    if spared is not None:
        return PendingReason(Stage.PREEMPTION, Plugin.RECLAIM_SPARING, spared)
    young = next(filter(None, (c.preemptor.maturing(w, d) for d in demands)), None)
    if young is not None:
        return PendingReason(Stage.PREEMPTION, Plugin.MIN_RUNTIME, young)
    return None


def plan_for(
    c: CycleState, w: Workload, combo: Sequence[Flavor | None], ignore_quota: bool = False
) -> tuple[Plan | None, Demand, PendingReason | None]:
    needs = [c.needs_of(ps, f) for ps, f in zip(w.pod_sets, combo, strict=True)]

    def demand_of(counts: Sequence[int]) -> Demand:
        d: Counter[FlavorName] = Counter()
        for n, k in zip(needs, counts, strict=True):
            if n.flavor is not None:
                d[n.flavor] += n.slices * k
        return dict(d)

    full = [ps.count for ps in w.pod_sets]
    minimum = [ps.min_count for ps in w.pod_sets]
    if ignore_quota:
        # Preemption makes room for the minimum only: evict no more than the gang needs.
        return (
            [(n, m, m) for n, m in zip(needs, minimum, strict=True)],
            demand_of(minimum),
            None,
        )
    verdict = c.quotas.check(w.queue, demand_of(full))
    if verdict.fits:
        return (
            [(n, k, m) for n, k, m in zip(needs, full, minimum, strict=True)],
            demand_of(full),
            None,
        )
    if minimum != full and c.quotas.check(w.queue, demand_of(minimum)).fits:
        counts = minimum
        if len(needs) == 1:
            # One pod set: admit as many pods as quota allows between min and count.
            counts = [
                next(
                    k
                    for k in range(full[0] - 1, minimum[0] - 1, -1)
                    if c.quotas.check(w.queue, demand_of([k])).fits
                )
            ]
        plan = [(n, k, m) for n, k, m in zip(needs, counts, minimum, strict=True)]
        return plan, demand_of(counts), None
    message = verdict.message
    if verdict.reclaimable and c.cfg.preemption:
        # Within its nominal quota: say why reclaim has not made room (yet).
        message += (
            "; within its nominal quota, it reclaims from borrowing queues once their work "
            f"is preemptible and has run {c.cfg.min_runtime_s}s"
        )
    return (
        None,
        {},
        PendingReason(
            Stage.QUOTA,
            Plugin.CAPACITY_QUOTA,
            message,
            verdict.flavor,
            limit=None if verdict.limit is None else verdict.limit.value,
        ),
    )


def _place(
    c: CycleState, w: Workload, plan: Plan
) -> tuple[list[PodAssignment] | None, PendingReason | None]:
    # Under reservations a verdict depends on the workload (its seniority, its expected end),
    # not on its shape alone: no shape memo then.
    sig = None if c.placer.reserved else signature(w, plan)
    cached = c.memos.no_room(sig, c.ws.release_epoch) if sig is not None else None
    if cached is not None:
        return None, cached
    placed, reason = c.placer.place_gang(w, plan)
    if placed is None and sig is not None:
        assert reason is not None
        c.memos.found_no_room(sig, c.ws.release_epoch, reason)
    return placed, reason
