"""Reservations with runtime-aware backfill: a gang that waits for room gets the nodes where it
will fit soonest, and meanwhile only work that ends first, or leaves it its room, runs there.

At the start of each cycle, pending work that has waited `scheduling.reserve_after_s` and
neither fits its quota nor finds room now looks ahead (oldest, then highest priority first):
it takes the running work of the flavors it needs in the order that work is expected to end
(`core.runtime`: declared, learned from finished work of its kind, or the policy's long
default) and finds the fewest that must end before its quota allows it and its gang places,
by trying on the working state with them gone (a binary search over that order, rolled back).
The end of the last of them is the reservation's start; the nodes the gang landed on are
reserved, and so is its queue's quota of those flavors (`queueing.behind`): the queue's later
work goes first only if it is expected to end before the start.

On a reserved node another workload (newer, or of lower priority, than the gang) may take
slices only if it is expected to end before the start, or if what stays free there plus what
ends there by the start still covers what the gang needs of the node (`Hold.allows`). Work
that overruns its estimate is not killed: it counts as ending any moment, and the start moves
with it. Nothing is stored between cycles: each cycle works the reservation out again from
what runs, so a reservation lasts exactly as long as its gang waits and cannot fit.

Each queue's first starving workload in queue order may reserve, at most
RESERVATIONS_PER_CYCLE in all per cycle (each costs a few trial placements); a later gang
cannot land on an earlier gang's nodes, so they do not overlap. Taking them before the queues'
turns matters: a queue that borrows comes late in fair-share order, and its gang's nodes would
be gone by then. Only a gang whose size fits its queue's nominal quota reserves: one that can
only run on loan would drain nodes for a start the lenders' own work then reclaims.
"""

from __future__ import annotations

from collections.abc import Callable

from gpucarve.core.amounts import FlavorName
from gpucarve.core.policy import QueueingStrategy
from gpucarve.core.runtime import WHENCE
from gpucarve.core.workload import PodAssignment, RunningWorkload, Workload
from gpucarve.engine.admit import plan_for
from gpucarve.engine.decisions import PendingReason, Plugin, Reservation
from gpucarve.engine.placement.holds import Hold
from gpucarve.engine.placement.plan_keys import Plan
from gpucarve.engine.preemption import evict
from gpucarve.engine.state import CycleState
from gpucarve.engine.working import Working

RESERVATIONS_PER_CYCLE = 4
# Running workloads looked through for the end of the wait, soonest first: a gang that would
# need more of them to end waits without a reservation.
LOOKAHEAD = 256


EndOf = Callable[[RunningWorkload], int]


def look_ahead(
    ws: Working,
    head: Workload,
    plan: Plan,
    place: Callable[[], list[PodAssignment] | None],
    end_of: EndOf,
) -> tuple[int, list[PodAssignment], list[RunningWorkload]] | None:
    """When `head` fits soonest, where, and which running work must end first; None if it
    does not fit even once the LOOKAHEAD soonest-ending workloads are gone. Leaves `ws` as it
    found it."""
    flavors = {n.flavor for n, _, _ in plan if n.flavor is not None}
    holding = [
        rw
        for rw in ws.running.values()
        if rw.workload.id != head.id and any(p.flavor in flavors for p in rw.pods)
    ]
    holding.sort(key=lambda rw: (end_of(rw), rw.workload.id))
    holding = holding[:LOOKAHEAD]

    tried: dict[int, list[PodAssignment] | None] = {}

    def fits_after(k: int) -> list[PodAssignment] | None:
        if k not in tried:
            cp = ws.checkpoint()
            for rw in holding[:k]:
                evict(ws, ws.running[rw.workload.id])
            tried[k] = place()
            ws.rollback(cp)
        return tried[k]

    if not holding or fits_after(len(holding)) is None:
        return None
    lo, hi = 1, len(holding)  # fits after hi; find the least such k (fewer need not fit)
    while lo < hi:
        mid = (lo + hi) // 2
        if fits_after(mid) is not None:
            hi = mid
        else:
            lo = mid + 1
    placed = fits_after(lo)
    if placed is None:  # placement is a heuristic: not always monotone in what ended
        lo = len(holding)
        placed = fits_after(lo)
    assert placed is not None
    ended = holding[:lo]
    return end_of(ended[-1]), placed, ended


def holds_for(
    ws: Working,
    head: Workload,
    start: int,
    placed: list[PodAssignment],
    ended: list[RunningWorkload],
) -> dict[tuple[int, FlavorName], Hold]:
    """The holds of a reservation: per (node, flavor) the gang lands on, what it needs there
    and what the work that ends by `start` frees there."""
    need: dict[tuple[int, FlavorName], int] = {}
    for pod in placed:
        if pod.flavor is not None:
            key = (ws.node_index[pod.node], pod.flavor)
            need[key] = need.get(key, 0) + len(pod.slice_ids)
    releasing = dict.fromkeys(need, 0)
    for rw in ended:
        for pod in rw.pods:
            if pod.flavor is None:
                continue
            key = (ws.node_index[pod.node], pod.flavor)
            if key in releasing:
                releasing[key] += len(pod.slice_ids)
    return {
        key: Hold(head, start, n, releasing[key], ws.flavors[key[1]].shared)
        for key, n in need.items()
    }


def reserve_starving(c: CycleState) -> None:
    """Reservations for the work that has waited longest and cannot start now (see the module
    doc); before the queues take their turns."""
    after = c.cfg.reserve_after_s
    if not c.cfg.gang or after is None or not c.snapshot.pending:
        return
    if c.cfg.queueing is QueueingStrategy.STRICT_FIFO:
        after = 0
    due = c.now - after
    node_size: dict[str, int] = {}
    for (flavor, _), n in c.ws.total.items():
        node_size[flavor] = max(node_size.get(flavor, 0), n)
    starving = [w for w in c.snapshot.pending if w.submit_time <= due and _big(c, w, node_size)]
    # one per queue, its first in queue order (priority, then age); the oldest of those first
    heads: dict[str, Workload] = {}
    for w in sorted(starving, key=lambda w: (-w.priority, w.submit_time, w.id)):
        heads.setdefault(w.queue, w)
    for w in sorted(heads.values(), key=lambda w: (w.submit_time, -w.priority, w.id)):
        if len(c.decided.reservations) >= RESERVATIONS_PER_CYCLE:
            return
        _reserve(c, w)


def _big(c: CycleState, w: Workload, node_size: dict[str, int]) -> bool:
    """Whether the workload needs at least a whole node's worth of a flavor: smaller work
    fits as soon as anything of its size frees, and reserving for it only idles GPUs (both
    the example and a stream of one- and two-GPU jobs measured so)."""
    return any(n >= node_size.get(f, 0) > 0 for f, n in c.first_demand(w).items())


def _reserve(c: CycleState, head: Workload) -> None:
    # its first flavor choice per pod set: the one holds and quotas weigh
    combo = c.first_flavors(head)
    if combo is None:
        return  # no flavor serves it: it never runs, and reserves nothing
    plan, demand, _ = plan_for(c, head, combo, ignore_quota=True)
    assert plan is not None
    if c.quotas.exceeds_nominal(head.queue, demand):
        # It can only ever run on loan: draining nodes for it idles them for a start that
        # the lenders' own work reclaims (measured: docs/engine.md, "Reservations").
        return

    def place() -> list[PodAssignment] | None:
        if not c.quotas.check(head.queue, demand).fits:
            return None
        return c.placer.place_gang(head, plan)[0]

    with c.placer.strictly():
        cp = c.ws.checkpoint()
        fits = place()
        c.ws.rollback(cp)
        # Fits as things are: its room is kept until its queue's turn admits it (a queue
        # that borrows comes late in fair-share order).
        found = (
            (c.now, fits, []) if fits is not None else look_ahead(c.ws, head, plan, place, c.end_of)
        )
    if found is None:
        return
    start, placed, ended = found
    borrows = not c.within_nominal(head)
    for key, h in holds_for(c.ws, head, start, placed, ended).items():
        h.borrows = borrows
        c.placer.hold(key, h)
    holds_quota = not c.quotas.check(head.queue, demand).fits
    if holds_quota:
        # Its own queue's work (or the cohort's) keeps the quota it needs: that quota is kept
        # for it too. (A gang short only of room holds no quota: its queue's other work may
        # fit elsewhere.)
        for flavor, n in demand.items():
            c.holds.reserve_quota(head.queue, flavor, Hold(head, start, n, 0, False))
    nodes = tuple(sorted({p.node for p in placed}))
    c.decided.reserve(
        Reservation(head.id, head.queue, start, nodes, tuple(rw.workload.id for rw in ended))
    )
    if ended:
        last = ended[-1].workload
        c.holds.note_reserved(
            head.id,
            f"reserved {', '.join(nodes)}{' and its queue quota' if holds_quota else ''}, "
            "where and when it fits "
            f"soonest: expected in {_span(start - c.now)}, once {len(ended)} running "
            f"workload(s) end (the last, {last.id}, by {WHENCE[c.runtime(last)[1]]}); "
            "meanwhile other work runs there only if it is expected to end first or leaves "
            "the gang its room",
        )


def noted(c: CycleState, wid: str, reason: PendingReason) -> PendingReason:
    """A pending reason that also says what the workload reserved."""
    note = c.holds.reserved_note(wid)
    if note is None:
        return reason
    return PendingReason(
        reason.stage,
        Plugin.RESERVATION,
        f"{reason.message}; {note}",
        reason.flavor,
        reason.repartition_gpus,
        reason.limit,
    )


def _span(seconds: int) -> str:
    if seconds < 3600:
        return f"{max(1, seconds // 60)} min"
    return f"{seconds / 3600:.1f} h"
