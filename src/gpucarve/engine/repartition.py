"""Dynamic MIG inside the cycle: after the queue has been served from the layouts as they are,
repartition GPUs of dynamic pools for the MIG work that quota admits but no free instance holds.

Demand is the pods of pending workloads refused at placement whose pod sets could use a MIG
flavor of a dynamic pool, counted per profile (each profile weighted by the highest priority
asking for it). Eligible GPUs are those of the dynamic pools not changed within the pool's
minimum interval; the instances in use (including this cycle's admissions) are kept where they
are. `mig_plan.plan_pool` picks the GPUs and layouts (exact per GPU, greedy over the pool,
fewest changes first), at most `maxGpusPerCycle` GPUs per pool. No preemption is involved: a
repartition only reshapes free instances, so it is always the less disruptive action.

It also comes before preemption: a workload that would evict others for MIG instances first
asks `Reshaper.absorbs` whether this cycle's repartition can create them (beyond the free ones
that did not fit it, the ones being created and those promised to earlier workloads of the
cycle). If so it waits for them, with that reason, and nobody is evicted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Container, Mapping, Sequence

from gpucarve.core.amounts import ProfileName
from gpucarve.core.catalog import MigGeometry
from gpucarve.core.cluster import RECONFIGURING, UNAVAILABLE_TAINTS
from gpucarve.core.mig import Instance, place
from gpucarve.core.policy import Flavor, Pool, SliceKind
from gpucarve.core.requests import serves, slices_per_pod
from gpucarve.core.workload import Workload
from gpucarve.engine.decisions import PendingReason, Plugin, Repartition, Stage
from gpucarve.engine.mig.gpu_plan import PoolGpu
from gpucarve.engine.mig.pool_plan import plan_pool
from gpucarve.engine.state import CycleState


def plan(c: CycleState) -> tuple[tuple[Repartition, ...], tuple[tuple[str, int], ...]]:
    policy = c.policy
    dynamic = {p.name: p for p in policy.pools if p.mig_dynamic is not None}
    if not dynamic:
        return (), ()
    by_id = {w.id: w for w in c.snapshot.pending}
    # profile -> pool names whose flavors serve it, per flavor name
    flavor_pool = {
        f.name: pool.name for pool in dynamic.values() for f in pool.flavors() if f.profile
    }
    demand: dict[str, Counter[ProfileName]] = {name: Counter() for name in dynamic}
    top: dict[str, Counter[ProfileName]] = {name: Counter() for name in dynamic}
    for p in c.decided.pending:
        if p.reason.stage is not Stage.PLACEMENT:
            continue
        w = by_id.get(p.workload)
        if w is None:
            continue
        for ps in w.pod_sets:
            for f in c.flavors_for_set(w, ps):
                pool_name = flavor_pool.get(f.name)
                if pool_name is None or f.kind is not SliceKind.MIG or f.profile is None:
                    continue
                demand[pool_name][f.profile] += ps.min_count
                top[pool_name][f.profile] = max(top[pool_name][f.profile], w.priority + 1)
                break
    used, coming = instances_in_use(c)
    out: list[Repartition] = []
    unserved: Counter[ProfileName] = Counter()
    for name, pool in sorted(dynamic.items()):
        if not demand[name]:
            continue
        assert pool.mig_dynamic is not None
        gpus, arriving = _eligible(c, name, pool, used, coming)
        want = _beyond_free(gpus, demand[name], arriving)
        if not want:
            continue
        allowed = frozenset(f.profile for f in pool.flavors() if f.profile)
        # Higher priorities weigh more: ranks, so that one priority class never needs a
        # specific numeric scale to win. Within a rank an instance weighs its compute slices:
        # counted per instance, seven small ones would always beat the whole-GPU one that
        # waits beside them, and large work would starve.
        assert pool.model.mig is not None
        size = {p.name: p.compute_slices for p in pool.model.mig.profiles}
        ranks = {v: i + 1 for i, v in enumerate(sorted(set(top[name].values())))}
        weight = {p: float(ranks[v] * size[p]) for p, v in top[name].items()}
        plans, left = plan_pool(gpus, want, weight, pool.mig_dynamic.max_gpus_per_cycle, allowed)
        current = {g.gpu: g.current for g in gpus}
        # room left goes to the pool's usual mix first (its own layout, larger instances
        # first), then to more of what the queue asks for
        usual = {i.profile for layout in pool.mig_layouts for i in layout}
        order = sorted(usual, key=lambda p: (-size[p], p))
        order += [p for p, _ in sorted(weight.items(), key=lambda kv: (-kv[1], kv[0]))]
        for gp in plans:
            node_name, _, index = gp.gpu.rpartition("/gpu")
            layout, created, destroyed = gp.layout, gp.created, gp.destroyed
            if not pool.mig_dynamic.keep_in_use:
                layout = _filled(pool.model.mig, layout, order, allowed)
                created = tuple(sorted(set(layout) - set(current[gp.gpu])))
                destroyed = tuple(sorted(set(current[gp.gpu]) - set(layout)))
            out.append(Repartition(node_name, int(index), layout, created, destroyed, gp.reason))
        unserved.update(left)
    return tuple(out), tuple(sorted(unserved.items()))


def _filled(
    geom: MigGeometry,
    layout: tuple[Instance, ...],
    order: Sequence[str],
    allowed: frozenset[ProfileName],
) -> tuple[Instance, ...]:
    """A whole-GPU change recreates every instance anyway, and the GPU cannot change again
    until all its work is gone: room the plan leaves is filled in `order`."""
    out = list(layout)
    for profile in order:
        if profile not in allowed:
            continue
        while True:
            placed = place(geom, {profile: 1}, out)
            if placed.instances is None:
                break
            out.extend(placed.instances)
    return tuple(sorted(out))


class Reshaper:
    """Promises of this cycle's repartition to workloads that would otherwise preempt."""

    def __init__(self, c: CycleState) -> None:
        self.c = c
        self.dynamic = {p.name: p for p in c.policy.pools if p.mig_dynamic is not None}
        self.pool_of = {
            f.name: pool.name for pool in self.dynamic.values() for f in pool.flavors() if f.profile
        }
        self.promised: dict[str, Counter[ProfileName]] = {}
        # the GPUs being reconfigured, found once per cycle however many workloads ask
        self._coming: dict[str, Counter[ProfileName]] | None = None
        # per pool: what one plan for all its pending MIG work could give, per profile
        self._offer: dict[str, Counter[ProfileName]] = {}
        # per pool: demands a plan could not create this cycle (any demand covering one of
        # them cannot be created either)
        self._failed: dict[str, list[Counter[ProfileName]]] = {}

    def absorbs(
        self, w: Workload, combos: Sequence[Sequence[Flavor | None]]
    ) -> PendingReason | None:
        if not self.dynamic:
            return None
        for combo in combos:
            need: dict[str, Counter[ProfileName]] = {}
            for ps, f in zip(w.pod_sets, combo, strict=True):
                if f is None or f.kind is not SliceKind.MIG or f.profile is None:
                    continue
                pool_name = self.pool_of.get(f.name)
                if pool_name is None:
                    need = {}  # a pod set on a static pool: a repartition cannot serve it all
                    break
                need.setdefault(pool_name, Counter())[f.profile] += ps.count
            if need and all(self._fits(name, n) for name, n in need.items()):
                for name, n in need.items():
                    self.promised.setdefault(name, Counter()).update(n)
                what = ", ".join(
                    f"{k} × {p} in pool {name}"
                    for name, n in sorted(need.items())
                    for p, k in sorted(n.items())
                )
                return PendingReason(
                    Stage.PLACEMENT,
                    Plugin.MIG_REPARTITION,
                    f"no free MIG instance fits it; this cycle repartitions GPUs to create {what} "
                    "instead of preempting",
                )
        return None

    def _fits(self, name: str, need: Counter[ProfileName]) -> bool:
        total = need + self.promised.get(name, Counter())
        if name not in self._offer:
            # Each workload's promise used to plan the whole pool again (a cycle with hundreds
            # of small MIG workloads waiting took seconds per cycle). One plan for all the
            # pool's pending MIG work, at the cycle's first promise, says what the pool can
            # give; a promise within that needs no plan of its own.
            self._offer[name] = self._offered(name, self._pending_for(name))
        if _within(total, self._offer[name]):
            return True
        failed = self._failed.setdefault(name, [])
        if any(_within(f, total) for f in failed):
            return False
        if _within(total, self._offered(name, total)):
            return True
        failed.append(total)
        return False

    def _offered(self, name: str, demand: Counter[ProfileName]) -> Counter[ProfileName]:
        """How much of `demand` (instances per profile) the pool can give: the free instances
        that hold it already, and what a plan for the rest creates."""
        pool = self.dynamic[name]
        assert pool.mig_dynamic is not None
        if self._coming is None:
            self._coming = instances_coming(self.c)
        used, coming = instances_in_use(self.c, self._coming)
        gpus, arriving = _eligible(self.c, name, pool, used, coming)
        want = _beyond_free(gpus, demand, arriving)
        if not want:
            return Counter(demand)
        allowed = frozenset(f.profile for f in pool.flavors() if f.profile)
        _, left = plan_pool(gpus, want, None, pool.mig_dynamic.max_gpus_per_cycle, allowed)
        return Counter({p: n - left.get(p, 0) for p, n in demand.items()})

    def _pending_for(self, name: str) -> Counter[ProfileName]:
        """Instances per profile all the pending work could take from the pool (an upper
        bound of any set of promises: a pod set counts for every profile that serves it)."""
        pool = self.dynamic[name]
        memory = pool.model.memory_mib
        profiles = [(f, f.profile) for f in pool.flavors() if f.profile is not None]
        out: Counter[ProfileName] = Counter()
        for w in self.c.snapshot.pending:
            for ps in w.pod_sets:
                for f, profile in profiles:
                    if serves(ps.gpu, f, memory):
                        out[profile] += ps.count * slices_per_pod(ps.gpu, f, memory)
        return out


def _within(need: Counter[ProfileName], have: Counter[ProfileName]) -> bool:
    """Every profile of `need` at most what `have` holds."""
    return all(n <= have[p] for p, n in need.items())


def instances_in_use(
    c: CycleState, coming: dict[str, Counter[ProfileName]] | None = None
) -> tuple[Container[str], dict[str, Counter[ProfileName]]]:
    """Slice ids in use (the snapshot's allocations and this cycle's admissions), and per GPU
    being reconfigured the instances it is creating (`instances_coming`, passed when known)."""
    admitted = {sid for a in c.decided.admissions for pod in a.pods for sid in pod.slice_ids}
    used = _InUse(admitted, c.snapshot.cluster.allocations)
    return used, instances_coming(c) if coming is None else coming


class _InUse(Container[str]):
    """The snapshot's allocations and this cycle's admissions, without copying the first."""

    def __init__(self, admitted: set[str], allocated: Mapping[str, object]) -> None:
        self.admitted = admitted
        self.allocated = allocated

    def __contains__(self, sid: object) -> bool:
        return sid in self.admitted or sid in self.allocated


def instances_coming(c: CycleState) -> dict[str, Counter[ProfileName]]:
    """Per GPU being reconfigured, the instances it is creating (fixed for the cycle)."""
    out: dict[str, Counter[ProfileName]] = {}
    for sid, alloc in c.snapshot.cluster.allocations.items():
        if alloc.owner.startswith(RECONFIGURING):
            sl = c.snapshot.cluster.slices[sid]
            if sl.profile is not None:
                out.setdefault(f"{sl.node}/gpu{sl.gpu}", Counter())[sl.profile] += 1
    return out


def _eligible(
    c: CycleState,
    name: str,
    pool: Pool,
    used: Container[str],
    coming: dict[str, Counter[ProfileName]],
) -> tuple[list[PoolGpu], Counter[ProfileName]]:
    """The pool's GPUs a plan may change (not being reconfigured, not changed within the
    minimum interval), and the instances its GPUs being reconfigured are creating."""
    assert pool.mig_dynamic is not None and pool.model.mig is not None
    geom = pool.model.mig
    gpus: list[PoolGpu] = []
    arriving: Counter[ProfileName] = Counter()
    for node in c.snapshot.cluster.nodes:
        if node.pool != name:
            continue
        # new instances on a node that takes no pods would serve nobody (a node gpucarve
        # cordoned for a change still counts what that change is creating)
        unavailable = any(t.key in UNAVAILABLE_TAINTS for t in node.taints)
        for g in node.gpus:
            if g.id in coming:
                arriving.update(coming[g.id])
                continue
            if unavailable:
                continue
            changed = c.snapshot.mig_changed_at.get(g.id)
            if changed is not None and c.now - changed < pool.mig_dynamic.min_interval_s:
                continue
            in_use = tuple(i for i in g.mig_layout if f"{g.id}/{i.profile}@{i.start}" in used)
            if in_use and not pool.mig_dynamic.keep_in_use:
                continue  # whole-GPU reconfiguration: it waits until its work is done
            gpus.append(PoolGpu(g.id, geom, g.mig_layout, in_use))
    return gpus, arriving


def _beyond_free(
    gpus: Sequence[PoolGpu], demand: Counter[ProfileName], arriving: Counter[ProfileName]
) -> dict[ProfileName, int]:
    """What a plan must offer: the waiting work was refused at placement, so the free instances
    of its profiles did not fit it and it needs as many again beyond them, less what GPUs
    being reconfigured are creating."""
    free: Counter[ProfileName] = Counter()
    for g in gpus:
        free.update(i.profile for i in set(g.current) - set(g.in_use))
    want = Counter({p: n + free[p] - arriving[p] for p, n in demand.items()})
    return {p: n for p, n in sorted(want.items()) if n > 0}
