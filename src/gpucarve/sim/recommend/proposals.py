"""The policy changes the idle accounting points to, each a candidate of `simulate --recommend`'s
search (`search.py`), beside the scheduling options it tries everywhere.

Limits: the borrowing or lending limits a pool idled for, lifted. MIG: a MIG pool whose
free instances sat idle for `mig-layout` (instances of profiles nobody waited for, while work
waited for others) gets a layout matched to the demand the trace showed — the mean number of
instances of each profile in use if every MIG workload of the pool's model ran as it arrived,
scaled to the pool's GPUs and planned per GPU (`engine.mig.pool_plan`) — and each queue's quota
of the pool's profiles follows that demand (each profile's new capacity split between the queues
in proportion to what their work asked of it; borrowing and lending limits kept, lending at most
the new nominal); beside it, the layout as it is repartitioned on demand (dynamic MIG), and one
GPU quota per queue with dynamic MIG and drain.
"""

from __future__ import annotations

import copy
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpucarve.core.amounts import FlavorName, ProfileName, as_key
from gpucarve.core.catalog import MigGeometry
from gpucarve.core.mig import Instance, place, profiles_by_size
from gpucarve.core.policy import GpuUnit, Policy, Pool, SliceKind
from gpucarve.core.workload import GpuKind, Workload
from gpucarve.engine import PoolGpu, plan_pool


@dataclass(frozen=True)
class Proposal:
    name: str
    why: str
    doc: dict[str, Any]  # the whole policy document, changed


def mean_instances(
    workloads: Sequence[Workload], flavors: Mapping[ProfileName, FlavorName]
) -> dict[ProfileName, dict[str, float]]:
    """Per profile (of `flavors`: profile -> flavor), per queue: the mean number of instances in
    use over the arrivals if every MIG workload asking for it ran as it arrived (pods ×
    instances × duration / span)."""
    if not workloads:
        return {}
    span = max(1, max(w.submit_time for w in workloads) - min(w.submit_time for w in workloads))
    out: defaultdict[ProfileName, defaultdict[str, float]] = defaultdict(lambda: defaultdict(float))
    for w in workloads:
        for ps in w.pod_sets:
            if ps.gpu.kind is not GpuKind.MIG or ps.gpu.profile is None:
                continue
            if ps.gpu.profile not in flavors:
                continue
            out[ps.gpu.profile][w.queue] += ps.count * ps.gpu.count * (w.duration or 0) / span
    return {p: dict(q) for p, q in out.items()}


def layouts_for(
    mean: Mapping[ProfileName, float], geom: MigGeometry, gpus: int
) -> list[dict[ProfileName, int]]:
    """Layouts of one node's `gpus` GPUs for a mean concurrent mix of instances, scaled to fill
    them, at least one of each profile asked for."""
    compute = {name: c for c, name in profiles_by_size(geom)}
    total = sum(compute[p] * n for p, n in mean.items())
    scale = gpus * geom.compute_slices / total if total else 0.0
    demand = {p: max(1, int(n * scale)) for p, n in mean.items() if n > 0}
    while sum(compute[p] * n for p, n in demand.items()) > gpus * geom.compute_slices:
        most = max(demand, key=lambda p: (demand[p] * compute[p], p))
        if demand[most] == 1:
            break
        demand[most] -= 1
    weight = {p: float(compute[p]) for p in demand}
    empty = [PoolGpu(f"n/gpu{i}", geom, (), ()) for i in range(gpus)]
    plans, _ = plan_pool(empty, demand, weight)
    by_gpu = {p.gpu: p.layout for p in plans}
    layouts = [_filled(geom, list(by_gpu.get(g.gpu, ())), demand) for g in empty]
    # The plan is greedy: a profile asked for may have found no room (two 3g.40gb instances
    # take all of an A100's memory). The GPU holding the most of the best-served profile is
    # laid out again with the missing one first.
    for profile in sorted(demand):
        if any(i.profile == profile for layout in layouts for i in layout):
            continue
        held = Counter(i.profile for layout in layouts for i in layout)
        if not held:
            break
        richest = max(held, key=lambda p: (held[p] / demand.get(p, 1), p))
        k = max(range(len(layouts)), key=lambda k: sum(i.profile == richest for i in layouts[k]))
        first = place(geom, {profile: 1}, [])
        if first.instances is not None:
            layouts[k] = _filled(geom, list(first.instances), demand)
    return [dict(sorted(Counter(i.profile for i in layout).items())) for layout in layouts]


def _filled(
    geom: MigGeometry, layout: list[Instance], demand: Mapping[ProfileName, int]
) -> list[Instance]:
    """`layout` with the room left given to the profiles asked for, largest first."""
    for _, name in reversed(profiles_by_size(geom)):
        while name in demand:
            placed = place(geom, {name: 1}, layout)
            if placed.instances is None:
                break
            layout.extend(placed.instances)
    return layout


def _split(capacity: int, asked: Mapping[str, float]) -> dict[str, int]:
    """`capacity` instances between queues in proportion to what they asked (largest
    remainders last, by name on ties)."""
    total = sum(asked.values())
    if not total:
        return {}
    shares = {q: capacity * a / total for q, a in asked.items()}
    out = {q: int(s) for q, s in shares.items()}
    for q in sorted(shares, key=lambda q: (-(shares[q] - out[q]), q))[
        : capacity - sum(out.values())
    ]:
        out[q] += 1
    return {q: n for q, n in out.items() if n > 0}


def mig_layout(
    doc: Mapping[str, Any],
    policy: Policy,
    workloads: Sequence[Workload],
    idle_by_pool: Mapping[str, Mapping[str, float]],
) -> list[Proposal]:
    """A demand-matched layout for each MIG pool that idled for `mig-layout`."""
    out = []
    for i, pool in enumerate(policy.pools):
        if idle_by_pool.get(pool.name, {}).get("mig-layout", 0.0) <= 0:
            continue
        geom = pool.model.mig
        if geom is None:
            continue
        flavors = {
            f.profile: f.name
            for f in policy.flavors.values()
            if f.kind is SliceKind.MIG and f.model_id == pool.model.id and f.profile
        }
        asked = mean_instances(workloads, flavors)
        if not asked:
            continue
        mean = {p: sum(q.values()) for p, q in asked.items()}
        layouts = layouts_for(mean, geom, pool.gpus_per_node)
        new = copy.deepcopy(dict(doc))
        spec = new["pools"][i]
        spec["mig"] = {
            "perGpu": [{"gpus": [g], "layout": layout} for g, layout in enumerate(layouts)]
        }
        capacity = Counter[str]()
        for layout in layouts:
            for profile, n in layout.items():
                capacity[profile] += n * pool.nodes
        _requota(new, {flavors[p]: (capacity[p], asked.get(p, {})) for p in flavors})
        per_node = " + ".join(
            "{" + ", ".join(f"{p}: {n}" for p, n in layout.items()) + "}" for layout in layouts
        )
        hours = idle_by_pool[pool.name]["mig-layout"]
        out.append(
            Proposal(
                f"{pool.name}: layout matched to demand",
                f"{hours:,.0f} GPU-hours idle for mig-layout; per node {per_node}, and the "
                "queues' quotas of its profiles follow what their work asked",
                new,
            )
        )
        out.append(_dynamic(doc, i, pool.name, geom, pool.gpus, flavors, asked, hours))
        unit = policy.units.get(pool.unit)
        if unit is not None and all(f in pool_flavors(pool) for f, _ in unit.charges):
            out.append(_unit(doc, i, pool.name, unit, sorted(asked), hours))
    return out


def pool_flavors(pool: Pool) -> set[str]:
    return {f.name for f in pool.flavors()}


def _unit(
    doc: Mapping[str, Any],
    index: int,
    pool: str,
    unit: GpuUnit,
    profiles: list[str],
    hours: float,
) -> Proposal:
    """The pool's layout as it is, repartitioned on demand, draining the GPUs that empty
    soonest; each queue's quotas of the pool's flavors become one quota in GPUs of the unit,
    worth what they were (a limit set on every one of them is kept as their sum; one left
    unset on any stays unset), so a queue's GPUs may be carved whichever way its work asks."""
    new = copy.deepcopy(dict(doc))
    new["pools"][index].setdefault("mig", {})["dynamic"] = {
        "minSecondsBetweenChanges": 600,
        "maxGpusPerCycle": 4,
        "profiles": profiles,
        "drain": True,
    }
    cost = dict(unit.charges)
    for q in new.get("queues", []):
        quota = q.get("quota") or {}
        mine = {f: quota.pop(f) for f in sorted(quota) if f in cost}
        if not mine:
            continue
        entry: dict[str, float] = {}
        for key in ("nominal", "borrowingLimit", "lendingLimit"):
            values = [(spec.get(key), cost[f]) for f, spec in mine.items()]
            if all(v is not None for v, _ in values):
                parts = sum(int(v) * c for v, c in values if v is not None)
                gpus = parts / unit.parts_per_gpu
                entry[key] = int(gpus) if gpus == int(gpus) else gpus
        quota[unit.name] = entry
    return Proposal(
        f"{pool}: one GPU quota per queue, dynamic MIG with drain",
        f"{hours:,.0f} GPU-hours idle for mig-layout; each queue's quotas of the pool's "
        f"profiles become one quota of {unit.name} GPUs (carved as its work asks), the pool "
        f"repartitions on demand between {', '.join(profiles)} and drains the GPUs that "
        "empty soonest",
        new,
    )


def _dynamic(
    doc: Mapping[str, Any],
    index: int,
    pool: str,
    geom: MigGeometry,
    gpus: int,
    flavors: Mapping[ProfileName, FlavorName],
    asked: Mapping[ProfileName, Mapping[str, float]],
    hours: float,
) -> Proposal:
    """The pool's layout as it is, repartitioned on demand between the profiles asked for;
    each profile's quota is what all the pool's GPUs could hold of it, split by demand (a
    quota per profile no larger than the layout of the moment would leave nothing to reshape
    into)."""
    new = copy.deepcopy(dict(doc))
    profiles = sorted(asked)
    new["pools"][index].setdefault("mig", {})["dynamic"] = {
        "minSecondsBetweenChanges": 600,
        "maxGpusPerCycle": 4,
        "profiles": profiles,
    }
    most = {p.name: p.max_instances for p in geom.profiles}
    _requota(new, {flavors[p]: (gpus * most[p], asked[p]) for p in profiles})
    return Proposal(
        f"{pool}: dynamic MIG",
        f"{hours:,.0f} GPU-hours idle for mig-layout; repartition on demand between "
        f"{', '.join(profiles)}, quotas following what each queue asked",
        new,
    )


def _requota(doc: dict[str, Any], flavors: Mapping[str, tuple[int, Mapping[str, float]]]) -> None:
    """Each flavor's new capacity split between the queues by what they asked of it."""
    for flavor, (capacity, asked) in flavors.items():
        shares = _split(capacity, asked)
        for q in doc.get("queues", []):
            quota = q.setdefault("quota", {})
            n = shares.get(q["name"], 0)
            if n == 0:
                quota.pop(flavor, None)
                (q.get("maxPerWorkload") or {}).pop(flavor, None)
                continue
            entry = dict(quota.get(flavor) or {})
            entry["nominal"] = n
            if entry.get("lendingLimit") is not None:
                entry["lendingLimit"] = min(int(entry["lendingLimit"]), n)
            quota[flavor] = entry


# Limits a pool idled for, and the quota field that set it.
LIMIT_CAUSES = (("borrowing-limit", "borrowingLimit"), ("cohort-lending", "lendingLimit"))
# GPU-hours of a cause below which no change is worth a replay
WORTH_HOURS = 1.0


def limits(
    doc: Mapping[str, Any], policy: Policy, idle_by_pool: Mapping[str, Mapping[str, float]]
) -> list[Proposal]:
    """Per pool that idled while a borrowing limit (or a lending limit) kept waiting work out:
    the queues' limits on that pool's quotas lifted (a guarantee stays one: nominal quota is
    not touched, and lent quota is reclaimed when its owner needs it)."""
    out = []
    for pool in policy.pools:
        keys = {as_key(f.name) for f in pool.flavors()}
        unit = policy.units.get(pool.unit)
        if unit is not None:
            keys.add(unit.name)
        for cause, field in LIMIT_CAUSES:
            hours = idle_by_pool.get(pool.name, {}).get(cause, 0.0)
            if hours < WORTH_HOURS:
                continue
            new = copy.deepcopy(dict(doc))
            lifted = []
            for q in new.get("queues", []):
                for key, spec in sorted((q.get("quota") or {}).items()):
                    if key not in keys or not isinstance(spec, dict):
                        continue
                    value = spec.get(field)
                    # a lending limit of all of nominal is no limit: lifting it changes nothing
                    if value is None or (field == "lendingLimit" and value >= spec["nominal"]):
                        continue
                    del spec[field]
                    lifted.append(f"{q['name']} {key}")
            if lifted:
                what = "borrowing" if field == "borrowingLimit" else "lending"
                out.append(
                    Proposal(
                        f"{pool.name}: {what} limits lifted",
                        f"{hours:,.0f} GPU-hours idle for {cause}; {field} removed from "
                        + ", ".join(lifted),
                        new,
                    )
                )
    return out


# the share of a lender's nominal quota one move hands to a queue past its wait bound
MOVE_SHARE = 4


def quota_moves(doc: Mapping[str, Any], policy: Policy, past: Sequence[str]) -> list[Proposal]:
    """For each queue past its wait bound and each quota key it holds: a quarter of the
    nominal quota of the queue of its cohort that holds the most in that key, moved to it (who
    owns what is the platform team's to decide; the ranking weighs what the giver then waits
    against its own bound). A giver's lending limit above what it keeps comes down with it."""
    out = []
    queues = {q.name: q for q in policy.queues}
    for name in sorted(past):
        taker = queues.get(name)
        if taker is None or taker.cohort is None:
            continue
        for key in sorted({x.flavor for x in taker.quotas}):
            held = [
                (x.nominal, q.name)
                for q in policy.queues
                if q.cohort == taker.cohort and q.name != name
                for x in q.quotas
                if x.flavor == key and x.nominal > 0
            ]
            if not held:
                continue
            _, giver = min(held, key=lambda h: (-h[0], h[1]))  # the most, then by name
            if moved := _moved(doc, giver, name, key):
                out.append(moved)
    return out


def _moved(doc: Mapping[str, Any], giver: str, taker: str, key: str) -> Proposal | None:
    """`doc` with a quarter of `giver`'s nominal in `key` (as the document counts it: slices
    of a flavor, GPUs of a unit) moved to `taker`; None where there is less than 1 to move."""
    new = copy.deepcopy(dict(doc))
    by_name = {q.get("name"): q for q in new.get("queues", []) if isinstance(q, dict)}
    give = (by_name.get(giver, {}).get("quota") or {}).get(key)
    take = (by_name.get(taker, {}).get("quota") or {}).get(key)
    if not isinstance(give, dict) or not isinstance(take, dict):
        return None
    had, has = give.get("nominal"), take.get("nominal")
    if not isinstance(had, int | float) or not isinstance(has, int | float):
        return None
    amount = int(had) // MOVE_SHARE
    if amount < 1:
        return None
    give["nominal"] = had - amount
    take["nominal"] = has + amount
    lending = give.get("lendingLimit")
    if isinstance(lending, int | float) and lending > give["nominal"]:
        give["lendingLimit"] = give["nominal"]
    return Proposal(
        f"quota: {amount:g} {key} from {giver} to {taker}",
        f"{taker} waits past its bound; {giver}'s {key} nominal {had:g} → "
        f"{give['nominal']:g}, {taker}'s {has:g} → {take['nominal']:g}",
        new,
    )
