"""Queue order under pressure: strict heads, and the nodes a starving head reserves.

A head that cannot be admitted holds its queue for the flavors it needs once it has waited
`scheduling.maxHeadWaitSeconds` (at once under strict FIFO); on a placement failure it also
reserves, on the nodes most likely to hold it first, the flavors it needs: newer or
lower-priority work may not take them there. Other flavors of those nodes stay open (a MIG node
reserved for a waiting 1g.10gb pod still runs 4g.40gb work on its other instances).
"""

from __future__ import annotations

from collections import Counter

from gpucarve.core.policy import QueueingStrategy
from gpucarve.core.workload import TopologyMode, Workload
from gpucarve.engine.decisions import PendingReason, Plugin, Stage
from gpucarve.engine.placement import groups as topology_groups
from gpucarve.engine.state import CycleState


def holds_queue(c: CycleState, w: Workload, reason: PendingReason) -> bool:
    if reason.stage not in (Stage.QUOTA, Stage.PLACEMENT, Stage.PREEMPTION):
        return False
    if c.cfg.queueing is QueueingStrategy.STRICT_FIFO:
        return True
    return c.now - w.submit_time >= c.cfg.max_head_wait_s and within_nominal(c, w)


def within_nominal(c: CycleState, w: Workload) -> bool:
    """Whether the workload fits its queue's nominal quota on its first flavor choice. Only
    such a head may hold its queue: beyond nominal it runs on what the cohort happens to lend,
    which may never all be idle at once, and holding would idle the queue's own guaranteed
    quota meanwhile (and lend it out, pushing the borrowed room further away)."""
    for ps, flavors in zip(w.pod_sets, c.flavors_for(w), strict=True):
        if not flavors:
            continue
        f = flavors[0]
        need = c.needs_of(ps, f).slices * ps.min_count
        if need > c.quotas.nominal(w.queue, f.name):
            return False
    return True


def hold(c: CycleState, head: Workload, reason: PendingReason) -> None:
    """The head holds its queue's later work for the flavors it needs (work for other
    flavors goes on: a starving training gang does not stop the team's notebooks) and,
    when it failed on placement, those flavors against newer or lower work of any queue."""
    for flavors in c.flavors_for(head):
        for f in flavors:
            c.queue_holds.setdefault((head.queue, f.name), head)
    if reason.stage is Stage.PLACEMENT:
        reserve(c, head)


def reserve(c: CycleState, head: Workload) -> None:
    """Reserve, for a starving head that found no room, the nodes most likely to hold it
    first: for a topology constraint the group with the most free capacity, otherwise the
    emptiest nodes until their size covers the gang. Other work may still use every other
    node of the flavor (backfill), so one big gang no longer drains a whole pool."""
    demand: Counter[str] = Counter()
    for ps, flavors in zip(head.pod_sets, c.flavors_for(head), strict=True):
        if flavors:
            f = flavors[0]
            demand[f.name] += c.needs_of(ps, f).slices * ps.min_count
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
            c.placer.reserved.setdefault((n, flavor), head)


def behind(c: CycleState, w: Workload) -> PendingReason | None:
    if not c.queue_holds:
        return None
    for flavors in c.flavors_for(w):
        for f in flavors:
            head = c.queue_holds.get((w.queue, f.name))
            if head is not None:
                key = (w.queue, f.name, head.id)
                reason = c.behind_reasons.get(key)
                if reason is None:
                    waited = c.now - head.submit_time
                    reason = c.behind_reasons[key] = PendingReason(
                        Stage.QUEUEING,
                        Plugin.FIFO,
                        f"behind {head.id}, which holds queue {head.queue} for {f.name} "
                        f"(waiting {waited}s)",
                        f.name,
                    )
                return reason
    return None
