"""How much jobs that share one GPU by time-slicing slow each other down.

Fitted to the LUCID co-location measurements (Hu et al., ASPLOS 2023; 1,388 pairs of training
jobs sharing one GPU, each job's speed normalised to running alone) by
`tools/fit_colocation.py`: speed stays at 1 while the jobs' combined solo GPU utilisation is
below a knee, then falls linearly,

    speed(U) = 1                           U <= KNEE
             = max(FLOOR, 1 - SLOPE (U - KNEE))

with U the sum, in percent, of the solo utilisation of every job on the GPU. The data has pairs
only; more jobs extend the same line (an assumption, stated here and in the report), and FLOOR
keeps a heavily oversubscribed GPU from stopping. MIG instances do not interfere, and MPS is
modelled like time-slicing (its compute limits cap, but do not remove, contention).
"""

from __future__ import annotations

from collections.abc import Sequence

KNEE = 88.6  # percent of combined solo GPU utilisation
SLOPE = 0.00326  # speed lost per percent above the knee
FLOOR = 0.2


def speed(utilisations: Sequence[float]) -> float:
    """Relative speed of each job on a GPU shared by jobs with these solo utilisations."""
    total = sum(utilisations)
    if len(utilisations) <= 1 or total <= KNEE:
        return 1.0
    return max(FLOOR, 1.0 - SLOPE * (total - KNEE))


def fit_knee_line(
    points: Sequence[tuple[float, float]], start: float = 100.0
) -> tuple[float, float]:
    """Least-squares line of speed on combined utilisation over the points above `start`;
    returns (knee, slope) with the knee where the line reaches speed 1."""
    xs = [u for u, _ in points if u > start]
    ys = [s for u, s in points if u > start]
    if len(xs) < 2:
        raise ValueError("need at least two points above the start of the fit")
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = -sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    return mx - (1 - my) / slope, slope
