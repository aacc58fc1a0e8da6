"""The scheduling engine: one pure, deterministic cycle shared by the simulator and the
Kubernetes scheduler."""

from gpucarve.engine.decisions import (
    Admission,
    Cause,
    CycleResult,
    Eviction,
    Pending,
    PendingReason,
    Stage,
)
from gpucarve.engine.engine import Engine, run_cycle, run_whole_cycle

__all__ = [
    "Admission",
    "Cause",
    "CycleResult",
    "Engine",
    "Eviction",
    "Pending",
    "PendingReason",
    "Stage",
    "run_cycle",
    "run_whole_cycle",
]
