"""Queue order under pressure: strict heads, and the reservations of gangs that wait for room.

A head that cannot be admitted holds its queue for the flavors it needs once it has waited
`scheduling.maxHeadWaitSeconds` (at once under strict FIFO), if what it asks fits its queue's
nominal quota (beside what the queue already uses, when reservations are on). A gang with a
reservation (`engine.reservation`) short of quota holds its queue's quota of the flavors it
needs against later work expected to run past the gang's expected start; other flavors stay
open (a starving training gang does not stop the team's notebooks).
"""

from __future__ import annotations

from collections.abc import Callable

from gpucarve.core.amounts import FlavorName
from gpucarve.core.policy import QueueingStrategy
from gpucarve.core.workload import TopologyMode, Workload
from gpucarve.engine.decisions import PendingReason, Plugin, Stage
from gpucarve.engine.placement import groups as topology_groups
from gpucarve.engine.placement.holds import Hold, senior
from gpucarve.engine.state import CycleState


def holds_queue(c: CycleState, w: Workload, reason: PendingReason) -> bool:
    if reason.stage not in (Stage.QUOTA, Stage.PLACEMENT, Stage.PREEMPTION):
        return False
    if c.cfg.queueing is QueueingStrategy.STRICT_FIFO:
        return True
    return c.now - w.submit_time >= c.cfg.max_head_wait_s and within_nominal(c, w)


def within_nominal(c: CycleState, w: Workload) -> bool:
    """Whether a starving head may hold its queue. Beyond nominal a head runs on what the
    cohort happens to lend, and holding the queue would idle the queue's own guaranteed quota
    meanwhile. With runtime-aware reservations on, the head must fit beside what its queue
    already uses (the reservation keeps the queue's quota for it, letting through work that
    ends first); without them, its size alone is weighed, or a head whose queue's own work
    keeps its quota busy would never run."""
    if c.cfg.reserve_after_s is not None:
        return c.within_nominal(w)
    return not c.quotas.exceeds_nominal(w.queue, c.first_demand(w))


def hold(c: CycleState, head: Workload, reason: PendingReason) -> None:
    """The head holds its queue's later work for the flavors it needs (work for other
    flavors goes on: a starving training gang does not stop the team's notebooks) and, when
    it failed on placement and runtime-aware reservations are off, those flavors on the
    nodes most likely to hold it against newer or lower work of any queue."""
    for flavors in c.flavors_for(head):
        for f in flavors:
            c.holds.hold_queue(head.queue, f.name, head)
    if reason.stage is Stage.PLACEMENT and c.cfg.reserve_after_s is None:
        reserve_emptiest(c, head)


def reserve_emptiest(c: CycleState, head: Workload) -> None:
    """Without runtime-aware reservations (`scheduling.reserve_after_s` unset): reserve, for
    a starving head that found no room, the nodes most likely to hold it first: for a topology
    constraint the group with the most free capacity, otherwise the emptiest nodes until their
    size covers the gang. Newer or lower work may not take the flavor there at all; it may
    still use every other node of the flavor, so one big gang does not drain a whole pool."""
    demand = c.first_demand(head)
    groups = c.ws.groups_for(head.topology)
    ws = c.ws
    for flavor, need in sorted(demand.items()):
        index = ws.index[flavor]
        if head.topology is TopologyMode.NODE:
            # one node per group: the node with the most free, lowest index on ties
            best = max(((free, -n) for n, free in index.count.items()), default=None)
            nodes = [] if best is None else [-best[1]]
        elif groups is not None:
            room = topology_groups.room_by_group(ws, head.topology, index.count)
            most = max(room, key=lambda i: (room[i], -i), default=0)
            nodes = groups[most] if groups else []
        else:
            holders = [n for (f, n) in ws.total if f == flavor]
            holders.sort(key=lambda n: (-index.count.get(n, 0), n))
            nodes, size = [], 0
            for n in holders:
                if size >= need:
                    break
                nodes.append(n)
                size += ws.total[(flavor, n)]
        for n in nodes:
            c.placer.hold((n, flavor), Hold(head, -1, 0, 0, shared=True))


def behind(c: CycleState, w: Workload) -> PendingReason | None:
    if c.holds.any_quota_reserved():
        reason = _behind_reservation(c, w)
        if reason is not None:
            return reason
    if not c.holds.queues_held():
        return None
    for flavors in c.flavors_for(w):
        for f in flavors:
            head = c.holds.queue_head(w.queue, f.name)
            if head is not None:
                return c.memos.behind((w.queue, f.name, head.id), _behind_head(c, head, f.name))
    return None


def _behind_head(c: CycleState, head: Workload, flavor: FlavorName) -> Callable[[], PendingReason]:
    def make() -> PendingReason:
        waited = c.now - head.submit_time
        return PendingReason(
            Stage.QUEUEING,
            Plugin.FIFO,
            f"behind {head.id}, which holds queue {head.queue} for {flavor} (waiting {waited}s)",
            flavor,
        )

    return make


def _behind_reservation(c: CycleState, w: Workload) -> PendingReason | None:
    """Work of a queue whose reserving gang (older, or of higher priority) waits for the
    queue's quota to free up may go first only if it is expected to end before the gang's
    expected start."""
    end: int | None = None
    for flavors in c.flavors_for(w):
        for f in flavors:
            held = c.holds.quota_reserved(w.queue, f.name)
            if held is None or held.head.id == w.id or not senior(held.head, w):
                continue
            if end is None:
                end = c.ends_at(w)
            if end > held.start:
                seconds, source = c.runtime(w)
                return PendingReason(
                    Stage.QUEUEING,
                    Plugin.RESERVATION,
                    f"behind {held.head.id}, which reserved queue {w.queue}'s {f.name} quota "
                    f"from {held.start}s (in {held.start - c.now}s); this workload is "
                    f"expected to run {seconds}s ({source}), past that",
                    f.name,
                )
    return None
