"""What the dashboard shows, as plain JSON-able values, from one cycle's snapshot and result:
pure functions, so the live scheduler and a test (or the simulator) draw the same pictures.

The cluster is drawn after the cycle's decisions (evictions gone, admissions in), as the
scheduler is about to make it. Sizes are in GPUs: a slice counts its share of its GPU (a MIG
instance its memory slices, a shared replica 1/replicas, a whole GPU one), so a pool's states
add up to its GPUs however they are carved. Names of work in namespaces a viewer may not list
are left out (`Viewer`); its team's colour stays, so the picture is the same for everyone.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpucarve.core.amounts import Bound, FlavorName, QuotaKey
from gpucarve.core.cluster import RECONFIGURING, Gpu, Node, Slice
from gpucarve.core.policy import Policy, Quota, flavor_pools, gpu_shares
from gpucarve.core.snapshot import Snapshot
from gpucarve.dashboard.gpu_use import Readings
from gpucarve.engine import SCALE, Quotas, evicted_pods, usage_after
from gpucarve.engine.decisions import CycleResult
from gpucarve.engine.explain import explain, render
from gpucarve.kube.view.bound.held_slices import UNHEALTHY

FREE, USED, OUT, CHANGING, RESERVED, OTHER, STRANDED = (
    "free", "used", "out-of-service", "reconfiguring", "reserved", "other", "stranded",
)  # fmt: skip
# STRANDED: the part of a MIG GPU its layout leaves in no instance (six 1g.10gb leave a
# quarter of an A100): no slice holds it, yet it is the pool's, so the states add up to it
STATES = (USED, FREE, RESERVED, OUT, CHANGING, OTHER, STRANDED)
EPSILON = 1e-9
PAGE = 200  # nodes of a pool per page


@dataclass(frozen=True)
class Viewer:
    """Who is looking: `cluster` (may list nodes: pools, queues, idle, changes) and the
    namespaces whose workloads they may see by name (None: all)."""

    name: str
    cluster: bool = True
    namespaces: frozenset[str] | None = None

    def sees(self, workload: str) -> bool:
        return self.namespaces is None or workload.partition("/")[0] in self.namespaces


EVERYONE = Viewer("anyone")


@dataclass(frozen=True)
class Frame:
    """One cycle as the dashboard reads it."""

    snapshot: Snapshot
    result: CycleResult
    unhealthy: Mapping[str, str] = field(default_factory=dict)  # node/gpuN -> why
    reconfiguring: frozenset[str] = frozenset()  # node/gpuN
    # node/gpuN -> why: faulty GPUs left in service, their pool's gpuHealth budget spent
    past_budget: Mapping[str, str] = field(default_factory=dict)

    @property
    def policy(self) -> Policy:
        return self.snapshot.policy


@dataclass
class Holders:
    """Slice -> (workload, queue) after the cycle; reserved nodes -> the gang."""

    slices: dict[str, tuple[str, str]]
    reserved: dict[str, str]


def holders(frame: Frame) -> Holders:
    gone = evicted_pods(frame.result)
    out: dict[str, tuple[str, str]] = {}
    for rw in frame.snapshot.running:
        w = rw.workload
        whole = w.id in gone and gone[w.id] is None
        for pod in rw.pods:
            if whole or pod.pod in (gone.get(w.id) or ()):
                continue
            for sid in pod.slice_ids:
                out[sid] = (w.id, w.queue)
    for a in frame.result.admissions:
        for pod in a.pods:
            for sid in pod.slice_ids:
                out[sid] = (a.workload, a.queue)
    reserved = {n: r.workload for r in frame.result.reservations for n in r.nodes}
    return Holders(out, reserved)


def share(s: Slice, policy: Policy) -> float:
    """What a slice is of its GPU (`core.policy.gpu_share`)."""
    return shares(policy)[s.flavor]


def state_of(frame: Frame, h: Holders, s: Slice) -> str:
    gpu = f"{s.node}/gpu{s.gpu}"
    if s.id in h.slices:
        return USED
    alloc = frame.snapshot.cluster.allocations.get(s.id)
    if gpu in frame.reconfiguring or (alloc is not None and alloc.owner.startswith(RECONFIGURING)):
        return CHANGING
    if gpu in frame.unhealthy or (alloc is not None and alloc.owner.startswith(UNHEALTHY)):
        return OUT
    if alloc is not None:
        return OTHER  # held by something the policy does not govern
    if s.node in h.reserved:
        return RESERVED
    return FREE


def _teams(policy: Policy) -> list[str]:
    return [q.name for q in policy.queues]


_SHARES: list[tuple[Policy, dict[FlavorName, float]]] = []  # the last policies asked about


def shares(policy: Policy) -> dict[FlavorName, float]:
    """Flavor -> what one of its slices is of a GPU (kept for the policy's next cycles)."""
    for known, got in _SHARES:
        if known is policy:
            return got
    got = gpu_shares(policy)
    _SHARES[:] = [*_SHARES[-3:], (policy, got)]
    return got


def cluster(frame: Frame) -> dict[str, Any]:
    """Per pool: GPUs by state and by team, nodes, GPUs out of service."""
    policy, h = frame.policy, holders(frame)
    per = shares(policy)
    by_pool: dict[str, dict[str, Any]] = {}
    for p in policy.pools:
        by_pool[p.name] = {
            "name": p.name,
            "model": p.model.id,
            "sharing": p.sharing.value,
            "nodes": 0,
            "gpus": 0,
            "states": Counter(),
            "teams": Counter(),
            "outOfService": 0,
        }
    for node in frame.snapshot.cluster.nodes:
        row = by_pool.get(node.pool)
        if row is None:
            continue
        row["nodes"] += 1
        row["gpus"] += len(node.gpus)
        for gpu in node.gpus:
            row["outOfService"] += gpu.id in frame.unhealthy
            _count_gpu(frame, h, gpu, row, per)
    pools = []
    for row in by_pool.values():
        row["states"] = {k: round(v, 3) for k, v in sorted(row["states"].items())}
        row["teams"] = {k: round(v, 3) for k, v in sorted(row["teams"].items())}
        pools.append(row)
    return {"pools": pools, "teams": _teams(policy)}


def _count_gpu(
    frame: Frame, h: Holders, gpu: Gpu, row: dict[str, Any], per: dict[FlavorName, float]
) -> None:
    slices = frame.snapshot.cluster.slices
    held = 0.0
    for sid in gpu.slice_ids:
        s = slices[sid]
        part = per[s.flavor]
        held += part
        state = state_of(frame, h, s)
        row["states"][state] += part
        if state == USED:
            row["teams"][h.slices[sid][1]] += part
    if 1.0 - held > EPSILON:
        row["states"][STRANDED] += 1.0 - held


def _slice_row(frame: Frame, h: Holders, viewer: Viewer, s: Slice, gpu: Gpu) -> dict[str, Any]:
    state = state_of(frame, h, s)
    row: dict[str, Any] = {
        "id": s.id,
        "label": s.profile or (f"replica {s.replica}" if s.replica is not None else "GPU"),
        "share": round(share(s, frame.policy), 4),
        "start": s.start,
        "state": state,
    }
    if state == USED:
        workload, queue = h.slices[s.id]
        row["team"] = queue
        if viewer.sees(workload):
            row["workload"] = workload
    elif state == RESERVED:
        gang = h.reserved[s.node]
        if viewer.sees(gang):
            row["reservedFor"] = gang
    return row


def _gpu_row(frame: Frame, h: Holders, viewer: Viewer, gpu: Gpu) -> dict[str, Any]:
    slices = frame.snapshot.cluster.slices
    rows = [_slice_row(frame, h, viewer, slices[sid], gpu) for sid in gpu.slice_ids]
    # MIG instances in their placement order, as the GPU holds them
    rows.sort(key=lambda r: (r["start"] is None, r["start"] or 0, r["id"]))
    out: dict[str, Any] = {"index": gpu.index, "id": gpu.id, "slices": rows}
    left = 1.0 - sum(share(slices[sid], frame.policy) for sid in gpu.slice_ids)
    if left > EPSILON:
        out["stranded"] = round(left, 4)
    why = frame.unhealthy.get(gpu.id)
    if why is not None:
        out["outOfService"] = why
    if gpu.id in frame.reconfiguring:
        out["reconfiguring"] = True
    return out


def _node_row(frame: Frame, h: Holders, viewer: Viewer, node: Node) -> dict[str, Any]:
    return {
        "name": node.name,
        "pool": node.pool,
        "gpus": [_gpu_row(frame, h, viewer, g) for g in node.gpus],
        "reservedFor": h.reserved.get(node.name)
        if viewer.sees(h.reserved.get(node.name, ""))
        else None,
    }


def pool_nodes(frame: Frame, viewer: Viewer, pool: str, offset: int = 0) -> dict[str, Any] | None:
    """One page of a pool's nodes with their GPUs and slices (None: no such pool)."""
    if all(p.name != pool for p in frame.policy.pools):
        return None
    nodes = [n for n in frame.snapshot.cluster.nodes if n.pool == pool]
    h = holders(frame)
    page = nodes[offset : offset + PAGE]
    return {
        "pool": pool,
        "total": len(nodes),
        "offset": offset,
        "nodes": [_node_row(frame, h, viewer, n) for n in page],
    }


def node(frame: Frame, viewer: Viewer, name: str) -> dict[str, Any] | None:
    for n in frame.snapshot.cluster.nodes:
        if n.name == name:
            return _node_row(frame, holders(frame), viewer, n)
    return None


def queues(frame: Frame) -> dict[str, Any]:
    """Per queue and quota key: nominal, limits, used, borrowed (beyond nominal) and lent (its
    unused nominal that others of its cohort hold), in slices or, for a GPU unit, GPUs."""
    policy = frame.policy
    after = usage_after(frame.snapshot.running, frame.result)
    q = Quotas(policy, dict(after))
    pending: Counter[str] = Counter(p.queue for p in frame.result.pending)
    lent = _lent(q, policy)
    book = frame.result.usage  # with scheduling.usageHalfLifeSeconds only
    recent = book.decayed if book is not None else {}
    out = []
    for queue in policy.queues:
        rows = [
            _quota_row(q, policy, queue.name, quota, lent.get((queue.name, quota.flavor), 0))
            for quota in queue.quotas
        ]
        out.append(
            {
                "name": queue.name,
                "cohort": queue.cohort,
                "weight": queue.weight_milli / 1000,
                "namespaces": list(queue.namespaces),
                "pending": pending[queue.name],
                "fairShare": round(
                    q.fair_share(queue.name, recent.get(queue.name, 0)) / SCALE**2, 4
                ),
                # what it borrowed recently, decayed (None: the policy sets no half-life)
                "recentBorrowedShare": None
                if book is None
                else round(recent.get(queue.name, 0) / SCALE**2, 4),
                "quota": rows,
            }
        )
    return {"queues": out, "cohorts": cohort_tree_rows(q, policy)}


def cohort_tree_rows(q: Quotas, policy: Policy) -> list[dict[str, Any]]:
    """A cohort tree's nodes, parents before children (empty for flat cohorts): per quota
    key, its own nominal, what it holds (its own and what its members lend it), what its
    members draw of it, what it borrows from its parent and what it lends its parent (its
    holding it does not use, within its lending limit)."""
    tree = q.tree
    if tree is None:
        return []
    out = []
    for c in sorted(policy.cohorts, key=lambda c: (len(tree.path(c.name)), c.name)):
        rows = []
        for (name, key), lvl in sorted(tree.levels.items()):
            if name != c.name:
                continue
            unit = policy.units.get(key)
            per = unit.parts_per_gpu if unit is not None else 1
            own = c.quota(key)
            used = q.pool_used(c.name, key)
            rows.append(
                {
                    "key": key,
                    "unit": "GPUs" if unit is not None else "slices",
                    "nominal": (0 if own is None else own.nominal) / per,
                    "holds": lvl.subtree / per,
                    "used": used / per,
                    "borrowed": max(0, used - lvl.subtree) / per,
                    "lends": (
                        0 if c.parent is None else max(0, min(lvl.lendable, lvl.subtree - used))
                    )
                    / per,
                }
            )
        out.append(
            {
                "name": c.name,
                "parent": c.parent,
                "depth": len(tree.path(c.name)) - 1,
                "queues": sorted(tree.queues.get(c.name, ())),
                "quota": rows,
            }
        )
    return out


def _lent(q: Quotas, policy: Policy) -> dict[tuple[str, QuotaKey], int]:
    """(queue, quota key) -> what it lends: the cohort's borrowing of the key, shared between
    its lenders in proportion to the unused nominal each may lend (its lending limit kept),
    largest remainders first, so a cohort's lent adds up to its borrowed (a lender is not
    credited with a loan another made)."""
    out: dict[tuple[str, QuotaKey], int] = {}
    by_key: defaultdict[tuple[str, QuotaKey], list[tuple[str, int]]] = defaultdict(list)
    for queue in policy.queues:
        if queue.cohort is None:
            continue
        for quota in queue.quotas:
            spare = max(0, quota.nominal - q.used(queue.name, quota.flavor))
            spare = quota.lending_limit.cap(spare)
            by_key[(queue.cohort, quota.flavor)].append((queue.name, spare))
    for (cohort, key), lenders in by_key.items():
        borrowed = sum(q.borrowed(m, key) for m in q.members.get(cohort, ()))
        spare = sum(n for _, n in lenders)
        total = min(borrowed, spare)
        if not total:
            continue
        shares = {name: total * n / spare for name, n in lenders}
        given = {name: int(x) for name, x in shares.items()}
        rest = total - sum(given.values())
        for name in sorted(shares, key=lambda m: (-(shares[m] - given[m]), m))[:rest]:
            given[name] += 1
        out.update({(name, key): n for name, n in given.items()})
    return out


def _per(bound: Bound, per: int) -> float | None:
    return None if bound.most is None else bound.most / per


def _quota_row(q: Quotas, policy: Policy, queue: str, quota: Quota, lent: int) -> dict[str, Any]:
    key = quota.flavor
    unit = policy.units.get(key)
    per = unit.parts_per_gpu if unit is not None else 1
    used = q.used(queue, key)
    borrowed = q.borrowed(queue, key)
    return {
        "key": key,
        "unit": "GPUs" if unit is not None else "slices",
        "nominal": quota.nominal / per,
        "borrowingLimit": _per(quota.borrowing_limit, per),
        "lendingLimit": _per(quota.lending_limit, per),
        "used": used / per,
        "borrowed": borrowed / per,
        "lent": lent / per,
    }


def pending(
    frame: Frame, viewer: Viewer, team: str | None = None, limit: int = 500
) -> dict[str, Any]:
    """Waiting workloads the viewer may see, oldest first, with their reasons (the whole
    chain is `explain_lines`, one workload at a time: at 5,000 nodes it costs tens of ms)."""
    by_id = {w.id: w for w in frame.snapshot.pending}
    rows = []
    for p in frame.result.pending:
        if (team and p.queue != team) or not viewer.sees(p.workload):
            continue
        w = by_id.get(p.workload)
        rows.append((w.submit_time if w is not None else 0, p.workload, p))
    rows.sort(key=lambda r: (r[0], r[1]))
    out = [
        {
            "workload": wid,
            "queue": p.queue,
            "waitingSeconds": max(0, frame.result.now - submitted),
            "stage": p.reason.stage.value,
            "plugin": p.reason.plugin.value,
            "reason": p.reason.message,
        }
        for submitted, wid, p in rows[:limit]
    ]
    return {"total": len(rows), "workloads": out}


def explain_lines(frame: Frame, viewer: Viewer, workload: str) -> list[str] | None:
    """`gpucarve explain`'s chain for one workload (None: not one the viewer may see, or not
    in this cycle)."""
    if not viewer.sees(workload):
        return None
    e = explain(frame.snapshot, frame.result, workload)
    return None if e is None else render(e)


def idle_now(frame: Frame) -> dict[str, dict[str, float]]:
    """Pool -> cause -> GPUs free after this cycle for that cause."""
    policy = frame.policy
    pool_of = flavor_pools(policy)
    per_gpu = shares(policy)
    out: dict[str, dict[str, float]] = defaultdict(dict)
    for i in frame.result.idle:
        pool = pool_of.get(i.flavor) or "?"
        gpus = i.slices * per_gpu.get(i.flavor, 1.0)
        out[pool][i.cause.value] = round(out[pool].get(i.cause.value, 0.0) + gpus, 4)
    return dict(out)


def held_idle(frame: Frame, viewer: Viewer) -> list[dict[str, Any]]:
    """Running work its queue's idleness rule judges idle after this cycle (warned or
    reclaimable), with what follows; work the viewer may not see is named as such."""
    out = []
    now = frame.result.now
    for h in frame.result.held_idle:
        mine = viewer.sees(h.workload)
        out.append(
            {
                "workload": h.workload if mine else "(not yours to see)",
                "queue": h.queue,
                "stage": h.stage.value,
                "idleSeconds": now - h.since,
                "reclaimInSeconds": None if h.reclaim_at is None else h.reclaim_at - now,
                "message": h.message if mine else "(not yours to see)",
            }
        )
    return out


def changes(frame: Frame) -> dict[str, Any]:
    """GPUs out of service and MIG changes in flight now; this cycle's repartitions."""
    return {
        "outOfService": [{"gpu": g, "why": why} for g, why in sorted(frame.unhealthy.items())],
        "pastBudget": [{"gpu": g, "why": why} for g, why in sorted(frame.past_budget.items())],
        "reconfiguring": sorted(frame.reconfiguring),
        "repartitions": [
            {
                "gpu": f"{r.node}/gpu{r.gpu}",
                "layout": [i.profile for i in r.layout],
                "reason": r.reason,
            }
            for r in frame.result.repartitions
        ],
    }


# ---------------------------------------------------------------- what GPUs do (DCGM)


def with_use(nodes: list[dict[str, Any]], readings: Readings) -> None:
    """Each node row's GPUs given what DCGM measures on them (`use`), where it measures."""
    for n in nodes:
        for g in n["gpus"]:
            use = readings.get((n["name"], g["index"]))
            if use is not None:
                g["use"] = use.as_json()


def team_use(frame: Frame, readings: Readings) -> dict[str, dict[str, float]]:
    """Per team, what DCGM measures on the GPUs it holds after this cycle, each GPU weighed
    by the team's share of it (a replica of an 8-way shared GPU weighs an eighth): GPUs
    measured, their utilisation (averaged by weight) and framebuffer memory used."""
    h = holders(frame)
    slices, policy = frame.snapshot.cluster.slices, frame.policy
    acc: dict[str, list[float]] = {}  # team -> [GPUs, util × GPUs, GPUs with util, MiB]
    for node in frame.snapshot.cluster.nodes:
        for gpu in node.gpus:
            use = readings.get((node.name, gpu.index))
            if use is None:
                continue
            for sid in gpu.slice_ids:
                held = h.slices.get(sid)
                if held is None or state_of(frame, h, slices[sid]) != USED:
                    continue
                part = share(slices[sid], policy)
                a = acc.setdefault(held[1], [0.0, 0.0, 0.0, 0.0])
                a[0] += part
                if use.util_percent is not None:
                    a[1] += part * use.util_percent
                    a[2] += part
                if use.memory_used_mib is not None:
                    a[3] += part * use.memory_used_mib
    out: dict[str, dict[str, float]] = {}
    for team, (gpus, util, measured, mib) in sorted(acc.items()):
        row = {"gpus": round(gpus, 4), "memoryUsedMiB": round(mib)}
        if measured:
            row["utilPercent"] = round(util / measured, 1)
        out[team] = row
    return out


def cluster_use(frame: Frame, readings: Readings) -> dict[str, float]:
    """Over the cluster's GPUs DCGM measures: how many, their average utilisation and the
    framebuffer memory used and there."""
    known = {(n.name, g.index) for n in frame.snapshot.cluster.nodes for g in n.gpus}
    mine = [u for k, u in readings.items() if k in known]
    utils = [u.util_percent for u in mine if u.util_percent is not None]
    out: dict[str, float] = {"gpus": len(mine)}
    if utils:
        out["utilPercent"] = round(sum(utils) / len(utils), 1)
    out["memoryUsedMiB"] = round(sum(u.memory_used_mib or 0.0 for u in mine))
    out["memoryTotalMiB"] = round(sum(u.memory_total_mib or 0.0 for u in mine))
    return out
