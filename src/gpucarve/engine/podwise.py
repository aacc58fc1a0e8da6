"""Scheduling without gangs, as kube-scheduler does it (for the baselines).

Each pod is charged to quota and placed on its own, first fit over the flavors that serve it;
the pods of a workload that fit are placed and hold their GPUs while the rest wait, and later
cycles place the rest as room appears, before anything new. Elastic gangs grow the same way,
pod by pod (`grow_elastic`), once they run at their minimum.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from gpucarve.core.policy import Flavor
from gpucarve.core.workload import PodAssignment, RunningWorkload, Workload
from gpucarve.engine.decisions import Outcome, Pending, PendingReason, Plugin, Stage
from gpucarve.engine.placement.placer import Rejections
from gpucarve.engine.state import CycleState


def continue_partial_gangs(c: CycleState) -> None:
    """Without gangs, workloads with pods still unplaced get them placed as room appears,
    before anything new (kube-scheduler retries its unschedulable pods the same way)."""
    partial = [
        rw for rw in c.snapshot.running if len(rw.pods) < rw.workload.pods and not rw.terminating
    ]
    for rw in sorted(partial, key=lambda r: (r.workload.submit_time, r.workload.id)):
        placed = Counter(p.pod_set for p in rw.pods)
        outcome = place_pods_alone(c, rw.workload, placed, rw.pods)
        if outcome.reason is not None:
            c.decided.wait(Pending(rw.workload.id, rw.workload.queue, outcome.reason))


def grow_elastic(c: CycleState) -> None:
    """Elastic gangs (admitted with fewer pods than they have, at least their minimum) grow
    towards their full size as room appears, after new work had its turn; each pod is
    charged to quota on its own. A gang that shrank or was released this cycle waits."""
    changed = {e.workload for e in c.decided.evictions}
    # what ran short when the cycle began and nothing in it touched (not admitted, shrunk,
    # grown or released in it)
    grow = [
        rw
        for wid, rw in c.ws.short.items()
        if not rw.terminating and wid not in changed and wid not in c.decided.fresh and _whole(rw)
    ]
    for rw in sorted(
        grow, key=lambda r: (-r.workload.priority, r.workload.submit_time, r.workload.id)
    ):
        placed = Counter(p.pod_set for p in rw.pods)
        place_pods_alone(c, rw.workload, placed, rw.pods)


def _whole(rw: RunningWorkload) -> bool:
    placed = Counter(p.pod_set for p in rw.pods)
    return all(placed[ps.name] >= ps.min_count for ps in rw.workload.pod_sets)


def place_pods_alone(
    c: CycleState,
    w: Workload,
    placed_before: Counter[str],
    pods_before: Sequence[PodAssignment],
) -> Outcome:
    """Place pods one by one, each charged to quota on its own, as far as they go."""
    c.placer.begin(w)
    per_set = c.flavors_for(w)
    placed: list[PodAssignment] = []
    reason: PendingReason | None = None
    for ps, options in zip(w.pod_sets, per_set, strict=True):
        if ps.gpu.kind.value != "none" and not options:
            reason = PendingReason(
                Stage.VALIDATION,
                Plugin.FLAVOR,
                f"queue {w.queue} has no quota for {ps.gpu.describe()}",
            )
            break
        # Each pod goes to the first flavor (GPU model) with room, as kube-scheduler puts a
        # pod on any node that advertises the resource.
        choices: list[Flavor | None] = list(options) if options else [None]
        for i in range(placed_before[ps.name], ps.count):
            pod = None
            for f in choices:
                needs = c.needs_of(ps, f)
                if f is not None:
                    verdict = c.quotas.check(w.queue, {f.name: needs.slices})
                    if not verdict.fits:
                        limit = None if verdict.limit is None else verdict.limit.value
                        reason = PendingReason(
                            Stage.QUOTA,
                            Plugin.CAPACITY_QUOTA,
                            verdict.message,
                            f.name,
                            limit=limit,
                        )
                        continue
                rej = Rejections(Counter())
                pod = c.placer.place_pod(needs, w.pod_id(ps.name, i), None, rej)
                if pod is not None:
                    if f is not None:
                        # charge now, so the next pod's quota check sees this one
                        c.ws.adjust_usage(w.queue, f.name, needs.slices)
                    break
                reason = c.placer.reason_for(
                    needs, ps.count - placed_before[ps.name], len(placed), rej
                )
            if pod is None:
                break
            placed.append(pod)
            reason = None
        if reason is not None:
            break
    if placed:
        c.record(w, placed, Stage.QUOTA, pods_before=tuple(pods_before), precharged=True)
    if reason is not None and (placed or pods_before):
        done = len(placed) + len(pods_before)
        reason = PendingReason(
            reason.stage,
            reason.plugin,
            f"{done}/{w.pods} pods placed, the rest wait holding theirs: {reason.message}",
            reason.flavor,
        )
    return Outcome(bool(placed), reason)
