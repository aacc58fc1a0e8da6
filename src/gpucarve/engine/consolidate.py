"""Consolidation: move running work so that a waiting gang fits (KAI's consolidate).

After the queues' turns, a gang that quota admits but that no set of nodes holds (enough is
free in all, not where one placement fits: fragmentation, topology) may have running work
moved out of its way. A move is an eviction whose workload goes back to its queue and is
placed again at once; on Kubernetes its controller makes its pods again, so only work that
is `restartable` (pods with a controlling owner) moves.

A set of moves is made only when the trial on the working state shows all of it:
- the gang places once the movers are gone, and every mover then places again elsewhere
  (on its own flavors, within its queue's quota): nothing is moved into a wait;
- each mover is preemptible, has run the policy's minimum runtime, is not of higher priority
  than the gang and holds fewer GPU slices than the gang;
- the gang runs within its queue's nominal quota, or reclaim spares it
  (`scheduling.reclaimLargeVictimRatio` below its size): a gang on loan that reclaim may take
  back at the lenders' next job would lose the start the moves bought, with its progress;
- the GPU time the gang gains by starting now (its slices × how long it would otherwise wait:
  `reservation.look_ahead`, by when the work in its way is expected to end) exceeds the
  progress the movers lose (their slices × how long they have run), which the simulator
  makes them pay again.
One trial with every candidate gone comes first (what fails fails there); then the cheapest
single mover, then the cheapest movers together, at most
`scheduling.consolidateMaxMoves` moves per cycle and CONSOLIDATIONS_PER_CYCLE gangs: a cycle's
cost stays bounded. Nothing is stored between cycles.
"""

from __future__ import annotations

from collections.abc import Callable

from gpucarve.core.policy import Flavor
from gpucarve.core.workload import PodAssignment, RunningWorkload, Workload
from gpucarve.engine import reservation
from gpucarve.engine.admit import plan_for
from gpucarve.engine.decisions import Cause, Eviction, Plugin, Stage
from gpucarve.engine.preemption import evict
from gpucarve.engine.state import CycleState

CONSOLIDATIONS_PER_CYCLE = 2  # waiting gangs a cycle tries to make room for by moving work
MOVERS_TRIED = 16  # candidate movers per gang, cheapest first
# Placement refusals that moving work can mend (not a MIG repartition's wait, which comes
# anyway, nor quota, which moving does not change).
MENDABLE = frozenset({Plugin.GPU_SLICES, Plugin.TOPOLOGY, Plugin.CPU_MEMORY})


def consolidate(c: CycleState) -> None:
    """Move work for the first waiting gangs placement refused (see the module doc)."""
    moves = c.cfg.consolidate_max_moves
    if moves is None or not c.cfg.preemption or not c.ws.running:
        return
    refused = [
        p
        for p in c.decided.pending
        if p.reason.stage is Stage.PLACEMENT and p.reason.plugin in MENDABLE
    ]
    if not refused:
        return
    by_id = {w.id: w for w in c.snapshot.pending}
    waiting = sorted(
        (by_id[p.workload] for p in refused if p.workload in by_id),
        key=lambda w: (-w.priority, w.submit_time, w.id),
    )
    for w in waiting[:CONSOLIDATIONS_PER_CYCLE]:
        if moves <= 0:
            return
        moved = _make_room(c, w, moves)
        if moved:
            moves -= moved
            c.decided.placed_after_all(w.id)


def _own_combo(c: CycleState, rw: RunningWorkload) -> list[Flavor | None]:
    """The flavors a running workload holds, per pod set: it moves within them (its quota is
    charged there)."""
    held = {p.pod_set: p.flavor for p in rw.pods}
    return [
        c.policy.flavors[f] if (f := held.get(ps.name)) is not None else None
        for ps in rw.workload.pod_sets
    ]


def _slices(pods: tuple[PodAssignment, ...]) -> int:
    return sum(len(p.slice_ids) for p in pods if p.flavor is not None)


def _lost(c: CycleState, rw: RunningWorkload) -> int:
    """Slice-seconds of progress a move throws away."""
    return _slices(rw.pods) * max(0, c.now - rw.start_time)


def _spared(c: CycleState, size: int) -> bool:
    """Whether reclaim spares a gang of `size` slices from small reclaimers
    (`scheduling.reclaimLargeVictimRatio`): from a one-slice one at least."""
    ratio = c.cfg.reclaim_large_ratio
    return ratio is not None and size > ratio


def _make_room(c: CycleState, w: Workload, budget: int) -> int:
    """Move the cheapest work that lets `w` place now, if it pays; the number moved."""
    combo = c.first_flavors(w)
    if combo is None:
        return 0
    plan, demand, _ = plan_for(c, w, combo)
    if plan is None:
        return 0  # quota refuses it now: moving work changes nothing
    size = sum(demand.values())
    if not c.quotas.within_nominal(w.queue, demand) and not _spared(c, size):
        # On loan, reclaim would take it back at the lenders' next job: the start that moves
        # buy is lost with the gang's progress (measured, docs/engine.md "Consolidation").
        return 0

    def place() -> list[PodAssignment] | None:
        if not c.quotas.check(w.queue, demand).fits:
            return None
        return c.placer.place_gang(w, plan)[0]

    movers = _movers(c, w, set(demand), size)
    # One trial first: if moving every candidate does not make room, no part of them does
    # (what fails on a busy cluster fails in one placement, not in a search).
    if not movers or not _makes_room(c, place, movers):
        return 0
    found = reservation.look_ahead(c.ws, w, plan, place, c.end_of)
    wait = (found[0] if found is not None else c.now + c.cfg.default_runtime_s) - c.now
    gain = size * wait
    movers = [rw for rw in movers if _lost(c, rw) < gain]
    chosen = _search(c, w, place, movers, budget)
    lost = sum(_lost(c, rw) for rw in chosen) if chosen is not None else gain
    if chosen is None or lost >= gain:
        return 0
    for rw in chosen:
        evict(c.ws, c.ws.running[rw.workload.id])
        c.decided.evict(
            Eviction(
                rw.workload.id,
                rw.workload.queue,
                Cause.CONSOLIDATE,
                w.id,
                f"moved for {w.id}, which fits once it is gone (consolidation): it is placed "
                f"again elsewhere; {w.id} starts now instead of in about "
                f"{wait / 3600:.1f} h, for {lost / 3600:.2f} slice-hours of progress lost",
            )
        )
    placed = place()
    assert placed is not None, "the consolidation's trial stopped working"
    c.record(w, placed, Stage.PREEMPTION, [rw.workload.id for rw in chosen])
    return len(chosen)


def _movers(c: CycleState, w: Workload, flavors: set[str], size: int) -> list[RunningWorkload]:
    """Running work that may move for `w`, cheapest first (see the module doc)."""
    out: list[tuple[int, int, str, RunningWorkload]] = []
    for rw in c.ws.running.values():
        m = rw.workload
        if (
            m.id == w.id
            or not m.preemptible
            or not m.restartable
            or rw.terminating
            or m.id in c.decided.fresh
            or m.priority > w.priority
            or c.now - rw.start_time < c.cfg.min_runtime_s
            or not any(p.flavor in flavors for p in rw.pods)
        ):
            continue
        if _slices(rw.pods) < size:
            out.append((_lost(c, rw), -rw.start_time, m.id, rw))
    out.sort(key=lambda t: t[:3])
    return [t[3] for t in out[:MOVERS_TRIED]]


def _search(
    c: CycleState,
    w: Workload,
    place: Callable[[], list[PodAssignment] | None],
    movers: list[RunningWorkload],
    budget: int,
) -> list[RunningWorkload] | None:
    """The cheapest movers that let `w` place while each of them places again: one alone,
    else the cheapest in order up to `budget`; the state is left as it was."""
    for rw in movers:
        if _works(c, w, place, [rw]):
            return [rw]
    if budget < 2:
        return None
    chosen: list[RunningWorkload] = []
    for rw in movers[:budget]:
        chosen.append(rw)
        if len(chosen) > 1 and _works(c, w, place, chosen):
            return chosen
    return None


def _makes_room(
    c: CycleState, place: Callable[[], list[PodAssignment] | None], movers: list[RunningWorkload]
) -> bool:
    """Whether the gang places with every candidate mover gone (where they go is not asked)."""
    cp = c.ws.checkpoint()
    try:
        for rw in movers:
            evict(c.ws, c.ws.running[rw.workload.id])
        return place() is not None
    finally:
        c.ws.rollback(cp)


def _works(
    c: CycleState,
    w: Workload,
    place: Callable[[], list[PodAssignment] | None],
    movers: list[RunningWorkload],
) -> bool:
    ws = c.ws
    cp = ws.checkpoint()
    try:
        for rw in movers:
            evict(ws, ws.running[rw.workload.id])
        placed = place()
        if placed is None:
            return False
        for pod in placed:  # charged as `record` will charge it: movers' quota sees it
            if pod.flavor is not None:
                ws.adjust_usage(w.queue, pod.flavor, len(pod.slice_ids))
        # the gang's room taken, each mover must fit again
        for rw in sorted(movers, key=lambda r: (-_slices(r.pods), r.workload.id)):
            plan, _, _ = plan_for(c, rw.workload, _own_combo(c, rw))
            if plan is None or c.placer.place_gang(rw.workload, plan)[0] is None:
                return False
        return True
    finally:
        ws.rollback(cp)


__all__ = ("consolidate",)
