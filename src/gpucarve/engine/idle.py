"""Why GPUs sit idle while work waits: every flavor's free slices after a cycle, attributed to
the reason that kept waiting work off them.

For each flavor with free slices, the first waiting workload (in the order the cycle visited
them) that could run on that flavor names the cause by its pending reason: its queue's nominal
quota, its borrowing limit, the cohort's lending, a gang larger than all that is free, free
slices scattered where no placement fits (fragmentation), topology, CPU or memory beside the
GPUs, its queue's order, a reservation, or another reason. Free slices no waiting workload could
use are a MIG layout mismatch when work waits for another profile of the same GPU model, a
sharing mismatch when work waits for the same model shared another way (whole GPUs while the
pool time-slices them), and otherwise nothing waiting (work waiting for another model cannot
use them: its quota and request name that model's flavors). Work that
can never run (no flavor, past every ceiling) is not counted as waiting for anything.

The shares of a flavor add up to its free slices, so summed over time they add up to the free
capacity; the simulator and the scheduler's metrics turn them into GPU-seconds.
"""

from __future__ import annotations

from gpucarve.core.amounts import Demand, FlavorName
from gpucarve.core.policy import SliceKind
from gpucarve.core.workload import Workload
from gpucarve.engine.decisions import Idle, IdleCause, Pending, PendingReason, Plugin, Stage
from gpucarve.engine.state import CycleState

_BY_PLUGIN = {
    Plugin.RESERVATION: IdleCause.RESERVATION,
    Plugin.FIFO: IdleCause.QUEUE_ORDER,
    Plugin.TOPOLOGY: IdleCause.TOPOLOGY,
    Plugin.CPU_MEMORY: IdleCause.CPU_MEMORY,
    Plugin.MIG_REPARTITION: IdleCause.MIG_LAYOUT,
    Plugin.RECLAIM_GRACE: IdleCause.RECLAIM_GRACE,
    Plugin.RECLAIM_SPARING: IdleCause.RECLAIM_SPARING,
    Plugin.CYCLE_BUDGET: IdleCause.CYCLE_BUDGET,
}
_BY_LIMIT = {
    "borrowing-limit": IdleCause.BORROWING_LIMIT,
    "cohort": IdleCause.COHORT_LENDING,
}


def free_slices(c: CycleState) -> Demand:
    """Free slices per flavor on the working state (a shared flavor's replicas summed over
    its GPUs: the index keeps only the most free on one GPU of each node)."""
    return dict(c.ws.free_slices)


def account(c: CycleState) -> tuple[Idle, ...]:
    free = {f: n for f, n in free_slices(c).items() if n > 0}
    if not free:
        return ()
    first: dict[FlavorName, tuple[Pending, int]] = {}  # flavor -> first waiting that could use it
    models: set[tuple[str, str]] = set()  # (model, slice kind) someone waits for
    unclaimed = set(free)
    if c.decided.pending:
        waiting = {w.id: w for w in c.snapshot.pending}
        for p in c.decided.pending:
            if not unclaimed:
                break  # every free flavor has its first waiting workload
            w = waiting.get(p.workload)
            if w is None or p.reason.stage is Stage.VALIDATION:
                continue
            names, kinds = _flavors_of(c, w)
            models |= kinds
            claims = names & unclaimed
            if claims:
                needs = _needs(c, w)
                for name in claims:
                    first[name] = (p, needs[name])
                unclaimed -= claims
    out: list[Idle] = []
    for flavor, n in sorted(free.items()):
        hit = first.get(flavor)
        if hit is not None:
            pend, need = hit
            out.append(Idle(flavor, cause_of(pend.reason, need, n), n, pend.workload))
            continue
        f = c.ws.flavors[flavor].flavor
        waited = {k for m, k in models if m == f.model_id}
        if f.kind is SliceKind.MIG and SliceKind.MIG.value in waited:
            cause = IdleCause.MIG_LAYOUT
        elif waited:
            cause = IdleCause.SHARING_MODE
        else:
            cause = IdleCause.NOTHING_WAITING
        out.append(Idle(flavor, cause, n))
    return tuple(out)


def _flavors_of(
    c: CycleState, w: Workload
) -> tuple[frozenset[FlavorName], frozenset[tuple[str, str]]]:
    """The flavors a waiting workload could run on (its node selection included: an L4-only
    pod keeps no H100 idle), and their (model, slice kind)."""
    # a selection's answer follows the nodes' labels, which change between cycles
    kept = not any(ps.node_selector or ps.affinity for ps in w.pod_sets)

    def make() -> tuple[frozenset[FlavorName], frozenset[tuple[str, str]]]:
        names = frozenset(f.name for fs in c.flavors_for(w) for f in fs)
        flavors = c.ws.flavors
        kinds = frozenset((flavors[n].flavor.model_id, flavors[n].flavor.kind.value) for n in names)
        return names, kinds

    return c.memo.idle_flavors(w, make) if kept else make()


def _needs(c: CycleState, w: Workload) -> Demand:
    """Slices the workload needs of each flavor it could run on (its minimum pods)."""
    out: Demand = {}
    for ps, flavors in zip(w.pod_sets, c.flavors_for(w), strict=True):
        for f in flavors:
            out[f.name] = out.get(f.name, 0) + c.needs_of(ps, f).slices * ps.min_count
    return out


def cause_of(reason: PendingReason, need: int, free: int) -> IdleCause:
    """The cause a waiting workload's reason names, for `free` slices of a flavor of which
    it needs `need`."""
    by_plugin = _BY_PLUGIN.get(reason.plugin)
    if by_plugin is not None:
        return by_plugin
    if reason.plugin is Plugin.CAPACITY_QUOTA:
        return _BY_LIMIT.get(reason.limit or "", IdleCause.NOMINAL_QUOTA)
    if reason.plugin is Plugin.GPU_SLICES:
        return IdleCause.GANG_LARGER if need > free else IdleCause.FRAGMENTATION
    return IdleCause.OTHER
