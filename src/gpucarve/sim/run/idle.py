"""GPU-hours that sat free while work waited, by cause (the engine's `idle` accounting summed
over a run): each cycle's shares hold until the next cycle or the next instant with nothing
waiting.

Nothing-waiting is what is left of a pool's free capacity once every other cause is counted
(capacity over the window, less what pods held and what was out of service), so a pool's
causes add up to its free GPU-hours; the other causes come from the cycles alone.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

from gpucarve.core.amounts import FlavorName
from gpucarve.engine.decisions import Idle, IdleCause

HOUR = 3600.0


def idle_gpu_seconds(
    samples: Sequence[tuple[int, tuple[Idle, ...] | None]],
    gpu_per_slice: Mapping[FlavorName, float],
    pool_of: Mapping[str, str],
    start: int,
    end: int,
) -> dict[str, dict[str, float]]:
    """Pool -> cause -> GPU-seconds within [start, end), from the cycles' shares (not
    nothing-waiting: see `by_cause`). `pool_of` names a flavor's pool (pools joined by `+`
    for a flavor several pools serve)."""
    out: defaultdict[str, defaultdict[str, float]] = defaultdict(lambda: defaultdict(float))
    for i, (t, shares) in enumerate(samples):
        if shares is None:
            continue
        until = samples[i + 1][0] if i + 1 < len(samples) else end
        seconds = max(0, min(until, end) - max(t, start))
        if not seconds:
            continue
        for share in shares:
            if share.cause is IdleCause.NOTHING_WAITING:
                continue
            gpus = share.slices * gpu_per_slice[share.flavor]
            out[pool_of[share.flavor]][share.cause.value] += gpus * seconds
    return {p: dict(c) for p, c in out.items()}


def by_cause(
    attributed: Mapping[str, Mapping[str, float]], free_by_pool: Mapping[str, float]
) -> dict[str, dict[str, float]]:
    """Pool -> cause -> GPU-hours, nothing-waiting the rest of the pool's free GPU-seconds
    (never below zero: sampling at cycles can overcount a share by the instant it holds)."""
    out: dict[str, dict[str, float]] = {}
    for pool in sorted(set(free_by_pool) | set(attributed)):
        causes = dict(attributed.get(pool, {}))
        rest = free_by_pool.get(pool, 0.0) - sum(causes.values())
        causes[IdleCause.NOTHING_WAITING.value] = max(0.0, rest)
        out[pool] = {
            c: round(v / HOUR, 2)
            for c, v in sorted(causes.items())
            if v > 0 or c == IdleCause.NOTHING_WAITING.value
        }
    return out
