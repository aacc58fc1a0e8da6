"""What a cycle's decisions leave held, without applying them to a copy of the cluster: the
slices per queue and flavor, and the slice ids allocated. Evictions take the pods they name (an
elastic gang's surplus) or the whole gang; admissions, and gangs that grow, add theirs. The
queue statuses, the metrics and `explain` read these."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from gpucarve.core.amounts import FlavorName
from gpucarve.core.snapshot import Snapshot
from gpucarve.core.workload import RunningWorkload
from gpucarve.engine.decisions import CycleResult


def evicted_pods(result: CycleResult) -> dict[str, frozenset[str] | None]:
    """Workload -> the pods its evictions take (None: all of them)."""
    out: dict[str, set[str] | None] = {}
    for e in result.evictions:
        seen = out.get(e.workload, set())
        if not e.pods or seen is None:
            out[e.workload] = None
        else:
            out[e.workload] = seen | set(e.pods)
    return {w: None if pods is None else frozenset(pods) for w, pods in out.items()}


# The last answer, by the identity of what it was asked about: a scheduler's metrics and its
# queue statuses both ask it of the same cycle, and it passes over every running pod. (One
# tuple, replaced whole: a reader in another thread sees the old answer or the new.)
_last: tuple[Sequence[RunningWorkload], CycleResult, Counter[tuple[str, FlavorName]]] | None = None


def usage_after(
    running: Sequence[RunningWorkload], result: CycleResult
) -> Counter[tuple[str, FlavorName]]:
    """Slices per (queue, flavor) held once `result`'s decisions hold (a new Counter)."""
    global _last
    last = _last
    if last is not None and last[0] is running and last[1] is result:
        return Counter(last[2])
    usage = _usage_after(running, result)
    _last = (running, result, usage)
    return Counter(usage)


def _usage_after(
    running: Sequence[RunningWorkload], result: CycleResult
) -> Counter[tuple[str, FlavorName]]:
    gone = evicted_pods(result)
    usage: Counter[tuple[str, FlavorName]] = Counter()
    for rw in running:
        wid = rw.workload.id
        if wid in gone and gone[wid] is None:
            continue
        taken = gone.get(wid) or frozenset()
        for p in rw.pods:
            if p.flavor is not None and p.pod not in taken:
                usage[(rw.workload.queue, p.flavor)] += len(p.slice_ids)
    for a in result.admissions:
        for flavor, n in a.charged:
            usage[(a.queue, flavor)] += n
    return usage


def allocated_after(snapshot: Snapshot, result: CycleResult) -> set[str]:
    """Slice ids held once the decisions hold (holds that are no pod's, such as a MIG change
    in flight, stay)."""
    gone = evicted_pods(result)
    held = set(snapshot.cluster.allocations)
    for rw in snapshot.running:
        wid = rw.workload.id
        if wid in gone:
            taken = gone[wid]
            held.difference_update(
                sid for p in rw.pods if taken is None or p.pod in taken for sid in p.slice_ids
            )
    held.update(sid for a in result.admissions for p in a.pods for sid in p.slice_ids)
    return held
