"""MIG repartitioning plans: new layouts that serve more of the queued demand.

One GPU is planned exactly: a model has few valid layouts (77 for an A100-80GB without media
extensions), so every layout that keeps the instances in use where they are is tried, each with
the placement of its free instances that keeps most of the current free ones. The best serves
the most weighted demand, then changes the fewest instances, then keeps the most memory slices
free for later. A pool is planned greedily, one GPU at a time in a fixed order, each against
the demand the pool does not serve yet: fast, deterministic, and exact per GPU.

`allowed` limits the profiles a plan may create to those a pool has flavors (quota units) for.
The engine's cycle calls it through `engine.repartition`.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpucarve.core.amounts import ProfileName
from gpucarve.core.catalog import MigGeometry
from gpucarve.core.mig import Instance, all_placements, enumerate_layouts, occupancy

PLACEMENTS_PER_LAYOUT = 5_000


@dataclass(frozen=True, slots=True)
class GpuPlan:
    gpu: str
    layout: tuple[Instance, ...]  # the whole new layout, in-use instances included
    created: tuple[Instance, ...]
    destroyed: tuple[Instance, ...]
    serves: tuple[tuple[str, int], ...]  # free instances per profile that meet demand
    value: float
    reason: str

    @property
    def changes(self) -> int:
        return len(self.created) + len(self.destroyed)


def served_value(
    free: Counter[ProfileName],
    demand: Mapping[ProfileName, int],
    weight: Mapping[ProfileName, float],
) -> float:
    """Weighted demand that free instances (per profile) meet."""
    return sum(weight.get(p, 1.0) * min(n, demand.get(p, 0)) for p, n in free.items())


def plan_gpu(
    geom: MigGeometry,
    gpu: str,
    current: Sequence[Instance],
    in_use: Sequence[Instance],
    demand: Mapping[ProfileName, int],
    weight: Mapping[ProfileName, float] | None = None,
    media: bool = False,
    allowed: frozenset[ProfileName] | None = None,
) -> GpuPlan:
    """The best layout for one GPU (possibly its current one) given pending `demand`
    (instances wanted per profile) and each profile's `weight` (priority; default 1)."""
    w = weight or {}
    kept = tuple(sorted(in_use))
    now_free = tuple(sorted(set(current) - set(kept)))
    # A GPU holds at most `memory_slices` instances of a profile, so demand beyond that cannot
    # change the choice: capping it lets GPUs in the same state share one evaluation.
    cap = geom.memory_slices
    local = tuple(sorted((p, min(n, cap)) for p, n in demand.items() if n > 0))
    weights = tuple(w.get(p, 1.0) for p, _ in local)
    now_value, best_key, best = _choose(geom, now_free, kept, media, allowed, local, weights)
    if best is None or best_key is None or best_key[0] <= now_value:
        return GpuPlan(
            gpu,
            tuple(sorted(current)),
            (),
            (),
            _serves(Counter(i.profile for i in now_free), demand),
            now_value,
            "no layout keeping the instances in use serves more of the demand",
        )
    place, free = best
    return changed_plan(gpu, kept, now_free, place, free, demand, now_value, best_key[0])


def changed_plan(
    gpu: str,
    kept: tuple[Instance, ...],
    now_free: tuple[Instance, ...],
    place: tuple[Instance, ...],
    free: Counter[ProfileName],
    demand: Mapping[ProfileName, int],
    now_value: float,
    value: float,
) -> GpuPlan:
    created = tuple(sorted(set(place) - set(now_free)))
    destroyed = tuple(sorted(set(now_free) - set(place)))
    served = _serves(free, demand)
    gained = ", ".join(f"{n} × {p}" for p, n in served)
    return GpuPlan(
        gpu,
        tuple(sorted((*kept, *place))),
        created,
        destroyed,
        served,
        value,
        f"serves {gained or 'nothing'} (was {now_value:g}, now {value:g}), "
        f"{len(created) + len(destroyed)} instance change(s)",
    )


@functools.lru_cache(maxsize=16384)
def _choose(
    geom: MigGeometry,
    now_free: tuple[Instance, ...],
    kept: tuple[Instance, ...],
    media: bool,
    allowed: frozenset[ProfileName] | None,
    local: tuple[tuple[ProfileName, int], ...],
    weights: tuple[float, ...],
) -> tuple[
    float,
    tuple[float, int, int, str] | None,
    tuple[tuple[Instance, ...], Counter[ProfileName]] | None,
]:
    """The current value and the best option (rank, placement, free profiles) of one GPU
    state against capped demand."""
    demand = dict(local)
    w = {p: x for (p, _), x in zip(local, weights, strict=True)}
    now_value = served_value(Counter(i.profile for i in now_free), demand, w)
    best_key: tuple[float, int, int, str] | None = None
    best: tuple[tuple[Instance, ...], Counter[ProfileName]] | None = None
    for place, free, changes, spare, tie in options(geom, now_free, kept, media, allowed):
        value = served_value(free, demand, w)
        rank = (value, -changes, spare, tie)
        if best_key is None or rank > best_key:
            best_key, best = rank, (place, free)
    return now_value, best_key, best


@functools.lru_cache(maxsize=4096)
def options(
    geom: MigGeometry,
    now_free: tuple[Instance, ...],
    kept: tuple[Instance, ...],
    media: bool,
    allowed: frozenset[ProfileName] | None = None,
) -> tuple[tuple[tuple[Instance, ...], Counter[ProfileName], int, int, str], ...]:
    """Per layout that keeps `kept`: the placement of its free instances closest to
    `now_free`, their profiles, the instance changes, the memory slices left, a tie-break.
    Depends only on the GPU's state, so GPUs in the same state share it."""
    kept_counts = Counter(i.profile for i in kept)
    mine = set(now_free)
    out = []
    for key in enumerate_layouts(geom, media):
        if allowed is not None and any(p not in allowed for p, _ in key):
            continue
        counts = Counter(dict(key))
        counts.subtract(kept_counts)
        if any(n < 0 for n in counts.values()):
            continue  # would not keep an instance in use
        rest = {p: n for p, n in counts.items() if n > 0}
        placements = all_placements(geom, rest, kept, PLACEMENTS_PER_LAYOUT)
        if not placements:
            continue
        place = max(placements, key=lambda pl: (len(mine & set(pl)), [(-i.start) for i in pl]))
        changes = len(mine - set(place)) + len(set(place) - mine)
        spare = geom.memory_slices - bin(occupancy(geom, (*kept, *place))).count("1")
        free = Counter(i.profile for i in place)
        out.append((place, free, changes, spare, repr(sorted(place))))
    return tuple(out)


def _serves(
    free: Counter[ProfileName], demand: Mapping[ProfileName, int]
) -> tuple[tuple[str, int], ...]:
    return tuple((p, min(n, demand.get(p, 0))) for p, n in sorted(free.items()) if demand.get(p, 0))


@dataclass(frozen=True, slots=True)
class PoolGpu:
    gpu: str
    geom: MigGeometry
    current: tuple[Instance, ...]
    in_use: tuple[Instance, ...]
