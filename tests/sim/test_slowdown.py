"""The slow-down model's coefficients are the fit of the LUCID co-location data."""

from __future__ import annotations

import csv

import pytest

from gpucarve.sim.run import slowdown
from tests.paths import trace


def lucid_points() -> list[tuple[float, float]]:
    with trace("lucid-colocation", "single_data.csv").open() as fh:
        util = {
            (r["model"], r["dataset"], r["batchsize"], r["amp"]): float(r["gpu_util"])
            for r in csv.DictReader(fh)
        }
    points = []
    with trace("lucid-colocation", "colocate_info.csv").open() as fh:
        for r in csv.DictReader(fh):
            u = util[(r["model1"], r["dataset1"], r["batchsize1"], r["amp1"])]
            u += util[(r["model2"], r["dataset2"], r["batchsize2"], r["amp2"])]
            points += [(u, float(r["speed1"])), (u, float(r["speed2"]))]
    return points


def test_coefficients_are_the_fit_of_the_measurements() -> None:
    points = lucid_points()
    assert len(points) == 2 * 1388
    knee, slope = slowdown.fit_knee_line(points)
    assert knee == pytest.approx(slowdown.KNEE, abs=0.05)
    assert slope == pytest.approx(slowdown.SLOPE, abs=0.000005)


def test_model_tracks_the_measured_mean_speed_by_load() -> None:
    buckets: dict[int, list[float]] = {}
    for u, s in lucid_points():
        buckets.setdefault(int(u // 25) * 25, []).append(s)
    for start, speeds in buckets.items():
        if len(speeds) < 50:
            continue  # too few pairs to compare a mean
        measured = sum(speeds) / len(speeds)
        model = slowdown.speed([start + 12.5, 0.0001])
        assert abs(model - measured) < 0.06, (start, model, measured)


def test_speed_shape() -> None:
    assert slowdown.speed([95.0]) == 1.0
    assert slowdown.speed([40.0, 40.0]) == 1.0
    assert slowdown.speed([90.0, 90.0]) < slowdown.speed([60.0, 60.0]) < 1.0
    assert slowdown.speed([100.0] * 20) == slowdown.FLOOR
    with pytest.raises(ValueError, match="two points"):
        slowdown.fit_knee_line([(120.0, 0.9)])
