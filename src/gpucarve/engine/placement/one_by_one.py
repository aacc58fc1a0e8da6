"""Placing workloads one at a time, each staying where it is put: the engine's placer and
fragmentation model driven without a cycle (no quota, no queue, no preemption), as a fill
experiment places a trace's pods against the published schedulers (`bench fill`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from gpucarve.core.policy import Flavor, ScoringWeights
from gpucarve.core.requests import candidate_flavors, slices_per_pod
from gpucarve.core.snapshot import Snapshot
from gpucarve.core.workload import GpuRequest, PodSet, Workload
from gpucarve.engine.placement import flavor_rank
from gpucarve.engine.placement.placer import Placer
from gpucarve.engine.placement.plugins import PodNeeds
from gpucarve.engine.working import Working


class OneByOne:
    """Places workloads one at a time on `snapshot`'s cluster through the engine's placer,
    scored by `weights` among `candidates` nodes; what is placed stays."""

    def __init__(self, snapshot: Snapshot, weights: ScoringWeights, candidates: int = 16) -> None:
        self.policy = snapshot.policy
        self.ws = Working(snapshot)
        self.placer = Placer(self.ws, weights, candidates=candidates)
        self._flavors: dict[GpuRequest, list[Flavor]] = {}

    def needs_of(self, ps: PodSet, f: Flavor | None) -> PodNeeds:
        if f is None:
            return PodNeeds(ps, None, 0, False, 0, ps.cpu_milli, ps.memory_mib)
        info = self.ws.flavors[f.name]
        slices = slices_per_pod(ps.gpu, f, info.gpu_memory)
        shared_mem = info.gpu_memory * slices // f.replicas
        return PodNeeds(ps, f.name, slices, True, shared_mem, ps.cpu_milli, ps.memory_mib)

    def flavors(self, gpu: GpuRequest) -> list[Flavor]:
        hit = self._flavors.get(gpu)
        if hit is None:
            hit = self._flavors[gpu] = candidate_flavors(self.policy, gpu)
        return hit

    def place(self, w: Workload) -> list[str] | None:
        """The nodes of the pods placed, or None when the workload fits nowhere."""
        ps = w.pod_sets[0]
        flavors = self.flavors(ps.gpu)
        combos: list[tuple[Flavor | None, ...]] = [(f,) for f in flavors] or [(None,)]
        model = self.placer.model
        # the engine's demand: the pods placed so far (all still running) and this one
        needs = flavor_rank.first_flavor_needs(w, [flavors], self.needs_of)
        types = model.workload_types(w, needs)
        # a new demand, never the old one changed in place: the model is looked up by it
        demand = Counter(model.demand)
        demand.update(dict(types))
        model.demand = demand

        def plan(combo: Sequence[Flavor | None]) -> list[tuple[PodNeeds, int, int]]:
            return [(self.needs_of(ps, combo[0]), ps.count, ps.count)]

        if len(combos) > 1:
            choices = self.placer.preview(w, [plan(c) for c in combos])
            combos = flavor_rank.rank_combos(combos, choices)
        for combo in combos:
            placed, _ = self.placer.place_gang(w, plan(combo))
            if placed is not None:
                return [p.node for p in placed]
        left = Counter(model.demand)
        left.subtract(dict(types))  # dropped: it never runs
        model.demand = left
        return None
