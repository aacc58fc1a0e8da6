"""Room per topology group (a node, an NVLink domain or a rack): which groups can hold a gang's
demand, and how much the best one has free. Only nodes with room are visited, and they are few
on a busy cluster, where a walk over every group's nodes for every gang that asks was the
simulator's hottest spot."""

from __future__ import annotations

from collections.abc import Mapping

from gpucarve.core.amounts import FlavorName
from gpucarve.core.workload import TopologyMode
from gpucarve.engine.working import Working


def room_by_node(ws: Working, flavor: FlavorName) -> dict[int, int]:
    """Free slices of `flavor` per node. The index counts what one pod can get, which for a
    shared flavor is the freest GPU; a gang of several pods may use every GPU, so count them
    all (placement still checks each pod on its one GPU)."""
    count = ws.index[flavor].count
    if not ws.flavors[flavor].shared:
        return count
    return {
        n: sum(len(g.free) for g in ws.nodes[n].gpus.get(flavor, ())) if c else 0
        for n, c in count.items()
    }


def room_by_group(ws: Working, mode: TopologyMode, room: Mapping[int, int]) -> dict[int, int]:
    """Free slices per group position in `ws.groups_for(mode)` (groups with none left out)."""
    position = ws.group_positions(mode)
    per: dict[int, int] = {}
    for n, free in room.items():
        gi = position.get(n) if free else None
        if gi is not None:
            per[gi] = per.get(gi, 0) + free
    return per


def fitting(
    ws: Working, mode: TopologyMode, groups: list[list[int]], demand: Mapping[FlavorName, int]
) -> list[tuple[int, list[int]]]:
    """(free slices, group), in group order, for the groups with room for `demand`."""
    counts = {f: room_by_node(ws, f) for f in demand}
    if mode is TopologyMode.NODE and demand:
        # One node per group: walk only the nodes that hold the scarcest flavor.
        out: list[tuple[int, list[int]]] = []
        first = min(sorted(demand), key=lambda f: len(counts[f]))
        for n, free in counts[first].items():
            if free < demand[first]:
                continue
            here = [counts[f].get(n, 0) for f in demand]
            if all(r >= d for r, d in zip(here, demand.values(), strict=True)):
                out.append((sum(here), [n]))
        return out
    totals: dict[int, int] | None = None
    for f in sorted(demand):
        per = room_by_group(ws, mode, counts[f])
        need = demand[f]
        if totals is None:
            totals = {gi: per.get(gi, 0) for gi in range(len(groups)) if per.get(gi, 0) >= need}
        else:
            totals = {gi: t + per.get(gi, 0) for gi, t in totals.items() if per.get(gi, 0) >= need}
    found = totals or {}
    return [(found[gi], groups[gi]) for gi in sorted(found)]


def most_free(
    ws: Working, mode: TopologyMode, groups: list[list[int]], demand: Mapping[FlavorName, int]
) -> tuple[int, int]:
    """(free slices, size in nodes) of the group with the most room for `demand`'s flavors."""
    counts = [room_by_node(ws, f) for f in demand]
    if mode is TopologyMode.NODE and len(counts) == 1:
        return max(counts[0].values(), default=0), 1
    if mode is TopologyMode.NODE:
        nodes = {n for c in counts for n in c}
        return max(((sum(c.get(n, 0) for c in counts), 1) for n in nodes), default=(0, 1))
    total: dict[int, int] = {}
    for c in counts:
        for gi, r in room_by_group(ws, mode, c).items():
            total[gi] = total.get(gi, 0) + r
    if not total:
        return 0, max(len(g) for g in groups)
    gi = max(total, key=lambda i: (total[i], len(groups[i]), -i))
    return total[gi], len(groups[gi])
