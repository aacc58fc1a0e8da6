"""Exact MIG plans for one node: the combination of its GPUs' layouts that serves the most
weighted demand, then changes the fewest instances, then keeps the most memory slices free.

The value of a combination depends only on the free instances per profile it adds up to,
capped at the demand (instances beyond what is wanted serve nothing). So a dynamic programme
over the node's GPUs whose states are those capped vectors is exact; layouts whose vector and
changes are both beaten by another layout of the same GPU are dropped first. Per-GPU planning
alone is not exact for a node: two GPUs can each prefer the profile the other already covers.

The state space is bounded by the demand, which is small in a running cluster (the pool's
other GPUs serve most of it); past `MAX_STATES` the caller falls back to per-GPU plans.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpucarve.core.amounts import ProfileName
from gpucarve.core.catalog import MigGeometry
from gpucarve.core.mig import Instance, occupancy
from gpucarve.engine.mig.gpu_plan import GpuPlan, PoolGpu, changed_plan, options, served_value

MAX_STATES = 20_000


@dataclass(frozen=True, slots=True)
class _Option:
    vector: tuple[int, ...]
    changes: int
    spare: int
    place: tuple[Instance, ...] | None  # None: keep the current layout
    free: Counter[ProfileName]


def _gpu_options(
    g: PoolGpu,
    profiles: tuple[ProfileName, ...],
    caps: tuple[int, ...],
    allowed: frozenset[ProfileName] | None,
) -> tuple[tuple[Instance, ...], tuple[Instance, ...], tuple[_Option, ...]]:
    kept = tuple(sorted(g.in_use))
    now_free = tuple(sorted(set(g.current) - set(kept)))
    # One GPU never holds more than `memory_slices` instances of a profile, so capping there
    # loses nothing and lets GPUs in the same state share the work.
    m = g.geom.memory_slices
    gpu_caps = tuple(min(c, m) for c in caps)
    return kept, now_free, _options_of(g.geom, now_free, kept, allowed, profiles, gpu_caps)


@functools.lru_cache(maxsize=8192)
def _options_of(
    geom: MigGeometry,
    now_free: tuple[Instance, ...],
    kept: tuple[Instance, ...],
    allowed: frozenset[ProfileName] | None,
    profiles: tuple[ProfileName, ...],
    caps: tuple[int, ...],
) -> tuple[_Option, ...]:
    """The layouts of a GPU in this state worth considering: per capped vector the one with
    fewest changes, without those another layout beats on vector and changes both."""

    def vector(free: Counter[ProfileName]) -> tuple[int, ...]:
        return tuple(min(free.get(p, 0), c) for p, c in zip(profiles, caps, strict=True))

    keep_free = Counter(i.profile for i in now_free)
    keep_spare = geom.memory_slices - bin(occupancy(geom, (*kept, *now_free))).count("1")
    best: dict[tuple[int, ...], _Option] = {
        vector(keep_free): _Option(vector(keep_free), 0, keep_spare, None, keep_free)
    }
    for place, free, changes, spare, _ in options(geom, now_free, kept, False, allowed):
        v = vector(free)
        o = _Option(v, changes, spare, place, free)
        old = best.get(v)
        if old is None or (changes, -spare) < (old.changes, -old.spare):
            best[v] = o
    found = list(best.values())
    kept_opts = [
        o
        for o in found
        if not any(
            p is not o
            and p.changes <= o.changes
            and all(a >= b for a, b in zip(p.vector, o.vector, strict=True))
            for p in found
        )
    ]
    return tuple(kept_opts)


def plan_node(
    gpus: Sequence[PoolGpu],
    demand: Mapping[ProfileName, int],
    weight: Mapping[ProfileName, float] | None = None,
    allowed: frozenset[ProfileName] | None = None,
    max_changed_gpus: int | None = None,
) -> list[GpuPlan] | None:
    """The exact plan of one node's GPUs (only the GPUs it changes), or None when the state
    space outgrows `MAX_STATES`."""
    w = weight or {}
    profiles = tuple(sorted(p for p, n in demand.items() if n > 0))
    caps = tuple(demand[p] for p in profiles)
    weights = tuple(w.get(p, 1.0) for p in profiles)
    limit = len(gpus) if max_changed_gpus is None else min(max_changed_gpus, len(gpus))
    per_gpu = [_gpu_options(g, tuple(profiles), caps, allowed) for g in gpus]
    # Profiles whose demand the node could exceed are the only ones whose cap can bind; the
    # others add up linearly, so they leave the state and become a bonus per option.
    binding = [
        j
        for j, cap in enumerate(caps)
        if sum(max(o.vector[j] for o in opts) for _, _, opts in per_gpu) > cap
    ]
    linear = [j for j in range(len(caps)) if j not in binding]
    bcaps = tuple(caps[j] for j in binding)
    count_changed = limit < len(gpus)
    # state: (binding vector, GPUs changed) -> (-bonus, changes, -spare, choices so far)
    State = tuple[tuple[int, ...], int]
    Score = tuple[float, int, int, tuple[int, ...]]
    states: dict[State, Score] = {(tuple(0 for _ in binding), 0): (0.0, 0, 0, ())}
    for _, _, opts in per_gpu:
        moves = [
            (
                k,
                tuple(o.vector[j] for j in binding),
                sum(weights[j] * o.vector[j] for j in linear),
                o.place is not None and o.changes > 0,
                o,
            )
            for k, o in enumerate(opts)
        ]
        nxt: dict[State, Score] = {}
        for (vec, n_changed), (neg_bonus, changes, neg_spare, picks) in states.items():
            for k, part, bonus, changing, o in moves:
                changed = n_changed + changing
                if changed > limit:
                    continue
                key = (
                    tuple(min(a + b, c) for a, b, c in zip(vec, part, bcaps, strict=True)),
                    changed if count_changed else 0,
                )
                cand = (neg_bonus - bonus, changes + o.changes, neg_spare - o.spare, (*picks, k))
                old = nxt.get(key)
                if old is None or cand < old:
                    nxt[key] = cand
        states = nxt
        if len(states) > MAX_STATES:
            return None

    def rank(item: tuple[State, Score]) -> tuple[float, int, int, tuple[int, ...]]:
        (vec, _), (neg_bonus, changes, neg_spare, picks) = item
        value = sum(weights[j] * n for j, n in zip(binding, vec, strict=True)) - neg_bonus
        return (-value, changes, neg_spare, picks)

    _, (_, _, _, picks) = min(states.items(), key=rank)
    out: list[GpuPlan] = []
    for g, (kept, now_free, opts), k in zip(gpus, per_gpu, picks, strict=True):
        o = opts[k]
        if o.place is None or o.changes == 0:
            continue
        now_value = served_value(Counter(i.profile for i in now_free), demand, w)
        out.append(
            changed_plan(
                g.gpu,
                kept,
                now_free,
                o.place,
                o.free,
                demand,
                now_value,
                served_value(o.free, demand, w),
            )
        )
    return out


def node_optimum(
    gpus: Sequence[PoolGpu],
    demand: Mapping[ProfileName, int],
    weight: Mapping[ProfileName, float] | None = None,
    allowed: frozenset[ProfileName] | None = None,
) -> float:
    """The best weighted demand any combination of layouts of `gpus` can serve, found without
    pruning or a state limit (for tests and `bench/mig.py`)."""
    w = weight or {}
    profiles = sorted(p for p, n in demand.items() if n > 0)
    caps = tuple(demand[p] for p in profiles)
    states = {tuple(0 for _ in profiles)}
    for g in gpus:
        _, _, opts = _gpu_options(g, tuple(profiles), caps, allowed)
        states = {
            tuple(min(a + b, c) for a, b, c in zip(s, o.vector, caps, strict=True))
            for s in states
            for o in opts
        }
    return max(sum(w.get(p, 1.0) * n for p, n in zip(profiles, s, strict=True)) for s in states)
