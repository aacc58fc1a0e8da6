"""How many examples a property test draws: the CI budget times `GPUCARVE_FUZZ_SCALE`
(`bench/fuzz.py` runs the same tests at a larger scale)."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings


def fuzz_settings(examples: int) -> settings:
    scale = float(os.environ.get("GPUCARVE_FUZZ_SCALE") or 1)
    return settings(
        max_examples=max(1, int(examples * scale)),
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=os.environ.get("GPUCARVE_FUZZ_SEED") is None,
        database=None,
    )
