"""Workloads that can never be admitted, whatever else runs or leaves.

A gang that needs more than its queue can ever reach (nominal plus what it may borrow), more
slices on one node than any node has, more than the whole cluster holds, more than any one
node, NVLink domain or rack holds for its topology constraint, or a node selector or required
affinity that no node carrying its flavor matches, would wait forever. Such a workload is
reported (stage `validation`, plugin `ceiling`; for a selector, the values the nodes do carry
and the nearest one) and never holds its queue.
"""

from __future__ import annotations

import difflib
from collections import Counter
from collections.abc import Sequence

from gpucarve.core.amounts import FlavorName
from gpucarve.core.policy import Flavor
from gpucarve.core.requests import slices_per_pod
from gpucarve.core.snapshot import Snapshot
from gpucarve.core.workload import TOPOLOGY_UNIT, PodSet, TopologyMode, Workload
from gpucarve.engine.decisions import PendingReason, Plugin, Stage
from gpucarve.engine.quota import Quotas
from gpucarve.engine.working import Working

UNIT = TOPOLOGY_UNIT


class Ceilings:
    def __init__(self, ws: Working, quotas: Quotas) -> None:
        self.ws = ws
        self.quotas = quotas
        # (selector, affinity, flavor) -> why no node of the flavor matches, or None
        self._unmatched: dict[tuple[object, ...], str | None] = {}
        # (preferred terms, flavor) -> the most any node of the flavor weighs by them
        self._preferred: dict[tuple[object, ...], int] = {}

    def _largest_node(self, flavor: FlavorName) -> int:
        return self._largest_group(TopologyMode.NODE, flavor)

    def _largest_group(self, mode: TopologyMode, flavor: FlavorName) -> int:
        key = (mode, flavor)
        cache = self.ws.largest
        if key not in cache:
            counts = self._per_node(flavor)
            if mode is TopologyMode.NODE:
                cache[key] = max(counts.values(), default=0)
            else:
                groups = self.ws.groups_for(mode) or []
                cache[key] = max((sum(counts.get(n, 0) for n in g) for g in groups), default=0)
        return cache[key]

    def _per_node(self, flavor: FlavorName) -> dict[int, int]:
        """Slices of `flavor` each node holds, or could hold once repartitioned: a dynamic MIG
        pool's GPUs can each be carved into the most instances of the profile that fit, so
        the layout of the moment is no ceiling."""
        out = {n: t for (f, n), t in self.ws.total.items() if f == flavor}
        profile = self.ws.flavors[flavor].flavor.profile
        if profile is None:
            return out
        for pool in self.ws.policy.pools:
            if pool.mig_dynamic is None or pool.model.mig is None:
                continue
            if flavor not in {f.name for f in pool.flavors()}:
                continue
            most = next(p.max_instances for p in pool.model.mig.profiles if p.name == profile)
            for node in self.ws.nodes:
                if node.pool == pool.name:
                    out[node.idx] = max(out.get(node.idx, 0), most * pool.gpus_per_node)
        return out

    def never_fits(self, w: Workload, combo: Sequence[Flavor | None]) -> PendingReason | None:
        demand: Counter[FlavorName] = Counter()
        for ps, f in zip(w.pod_sets, combo, strict=True):
            if f is None:
                continue
            if ps.node_selector or ps.affinity:
                why = self._unmatched_by(ps, f.name)
                if why is not None:
                    return self._reason(why, f.name)
            per_pod = slices_per_pod(ps.gpu, f, self.ws.flavors[f.name].gpu_memory)
            if not self.ws.flavors[f.name].shared and per_pod > self._largest_node(f.name):
                return self._reason(
                    f"a pod needs {per_pod} {f.name} but no node has more than "
                    f"{self._largest_node(f.name)}",
                    f.name,
                )
            demand[f.name] += per_pod * ps.min_count
        for flavor, d in sorted(demand.items()):
            reach = self.quotas.reach(w.queue, flavor)
            if d > reach:
                return self._reason(
                    f"needs {d} {flavor} but queue {w.queue} can never hold more than {reach} "
                    "(nominal quota plus what it may borrow)",
                    flavor,
                )
            capacity = self.ws.policy.capacity.get(flavor, 0)
            if d > capacity:
                return self._reason(f"needs {d} {flavor}; the cluster has {capacity}", flavor)
            if w.topology is not TopologyMode.NONE:
                most = self._largest_group(w.topology, flavor)
                if d > most:
                    unit = UNIT[w.topology]
                    return self._reason(
                        f"needs {d} {flavor} in one {unit}; the largest {unit} has {most}",
                        flavor,
                    )
        return None

    @staticmethod
    def _reason(message: str, flavor: FlavorName) -> PendingReason:
        return PendingReason(
            Stage.VALIDATION, Plugin.CEILING, "can never be admitted: " + message, flavor
        )

    def selects(self, ps: PodSet, flavor: FlavorName) -> bool:
        """Whether some node carrying `flavor` (or able to, once repartitioned) matches the
        pod set's node selector and required affinity."""
        return not (ps.node_selector or ps.affinity) or self._unmatched_by(ps, flavor) is None

    def preference(self, ps: PodSet, flavor: FlavorName) -> int:
        """The most the pod set's preferred node affinity weighs on a node carrying `flavor`
        (0 without preferences): a pod that prefers another GPU model's nodes tries that
        model's flavor first."""
        if not ps.preferred:
            return 0
        key = (ps.preferred, flavor)
        if key not in self._preferred:
            nodes = [self.ws.nodes[n] for n in sorted(self._per_node(flavor))]
            self._preferred[key] = max((ps.preference(n.labels) for n in nodes), default=0)
        return self._preferred[key]

    def _unmatched_by(self, ps: PodSet, flavor: FlavorName) -> str | None:
        """Why no node carrying `flavor` matches the pod set's selector and affinity (None:
        one does). Nodes of a dynamic MIG pool that could carry it count."""
        key = (ps.node_selector, ps.affinity, flavor)
        if key not in self._unmatched:
            nodes = [self.ws.nodes[n] for n in sorted(self._per_node(flavor))]
            if any(ps.selects(n.labels) for n in nodes):
                self._unmatched[key] = None
            else:
                self._unmatched[key] = _mismatch(ps, [n.labels for n in nodes], flavor)
        return self._unmatched[key]


def _mismatch(ps: PodSet, nodes: list[dict[str, str]], flavor: FlavorName) -> str:
    """The selector term no node of the flavor has, the values they carry, the nearest."""
    if not nodes:
        return f"no node carries {flavor}"
    for k, v in ps.node_selector:
        values = sorted({labels[k] for labels in nodes if k in labels})
        if v in values:
            continue
        if not values:
            keys = sorted({key for labels in nodes for key in labels})
            near = difflib.get_close_matches(k, keys, n=1, cutoff=0.6)
            hint = f"; did you mean {near[0]}?" if near else ""
            return f"no node carrying {flavor} has the label {k} (nodeSelector){hint}"
        near = difflib.get_close_matches(v, values, n=1, cutoff=0.3)
        shown = ", ".join(values[:5]) + (" …" if len(values) > 5 else "")
        hint = f"; did you mean {k}={near[0]}?" if near else ""
        return f"nodeSelector {k}={v} matches no node carrying {flavor}: {k} there is {shown}{hint}"
    terms = " or ".join(
        "(" + ", ".join(f"{r.key} {r.operator} {list(r.values)}" for r in term) + ")"
        for term in ps.affinity
    )
    return f"no node carrying {flavor} matches its required node affinity {terms}"


def selected_flavors(snapshot: Snapshot, ps: PodSet, flavors: Sequence[Flavor]) -> list[Flavor]:
    """`flavors` of which some node of a pool providing it matches the pod set's node selector
    and required affinity (all of them when none does: the ceiling names the requirement),
    preferred ones first: the choice the cycle makes (`CycleState.flavors_for`) read from a
    snapshot, for those that have no cycle's state (explain)."""
    if not (ps.node_selector or ps.affinity or ps.preferred):
        return list(flavors)
    providers: dict[str, set[str]] = {}
    for pool in snapshot.policy.pools:
        for f in pool.flavors():
            providers.setdefault(f.name, set()).add(pool.name)
    labels = [(n.pool, dict(n.labels)) for n in snapshot.cluster.nodes]

    def on(f: Flavor) -> list[dict[str, str]]:
        return [have for pool, have in labels if pool in providers.get(f.name, ())]

    kept = [f for f in flavors if any(ps.selects(have) for have in on(f))] or list(flavors)
    if ps.preferred:
        kept.sort(key=lambda f: -max((ps.preference(have) for have in on(f)), default=0))
    return kept
