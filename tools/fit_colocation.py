"""Fit gpucarve's time-slicing slow-down model to the LUCID co-location measurements.

Usage: python tools/fit_colocation.py ../shared/traces/lucid-colocation

Each row of colocate_info.csv is two training jobs sharing one GPU, with each job's speed
normalised to running alone. Joined with single_data.csv (each job's GPU utilisation alone),
speed depends on the pair's combined solo utilisation U: flat near 1 until the GPU saturates,
then falling about linearly. The fit is the least-squares line of speed on U over the pairs
with U above the knee, with the knee where that line reaches 1:

    speed(U) = 1                          if U <= knee
             = 1 - slope * (U - knee)     otherwise, floored at `floor`

Prints the coefficients that src/gpucarve/sim/run/slowdown.py holds (the fit is
`gpucarve.sim.run.slowdown.fit_knee_line`).
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

from gpucarve.sim.run.slowdown import fit_knee_line


def load(folder: Path) -> list[tuple[float, float]]:
    single = {}
    with (folder / "single_data.csv").open() as fh:
        for r in csv.DictReader(fh):
            single[(r["model"], r["dataset"], r["batchsize"], r["amp"])] = float(r["gpu_util"])
    points = []
    with (folder / "colocate_info.csv").open() as fh:
        for r in csv.DictReader(fh):
            k1 = (r["model1"], r["dataset1"], r["batchsize1"], r["amp1"])
            k2 = (r["model2"], r["dataset2"], r["batchsize2"], r["amp2"])
            u = single[k1] + single[k2]
            points.append((u, float(r["speed1"])))
            points.append((u, float(r["speed2"])))
    return points


def main(folder: str) -> None:
    points = load(Path(folder))
    knee, slope = fit_knee_line(points)
    print(f"pairs: {len(points) // 2}, knee: {knee:.1f} % combined utilisation, slope: {slope:.5f}")


if __name__ == "__main__":
    main(sys.argv[1])
