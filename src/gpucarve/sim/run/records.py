"""What a simulation takes and gives: its settings and its record (runs of workloads, starts,
completions, evictions, fragmentation samples, repartitions), read by `metrics` and `report`."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

from gpucarve.core.policy import GpuHealth, Policy
from gpucarve.core.workload import PodAssignment, Workload
from gpucarve.engine.decisions import Idle


@dataclass(frozen=True, slots=True, order=True)
class GpuFailure:
    at_s: int
    gpu: str  # `node/gpuN`
    repair_s: int  # until a person has it repaired
    # its fault class (core/gpu_faults.py); "" for a listed failure without one: out for
    # repair_s under every policy
    fault_class: str = ""


# What happens at one instant, in the order it is handled (then in the order scheduled).
class Kind(IntEnum):
    COMPLETION = 0
    RECONFIGURED = 1  # a repartitioned MIG GPU's new instances are ready
    GPU_REPAIRED = 2  # a failed GPU is back (before failures: a GPU may fail again at once)
    GPU_FAILED = 3
    ARRIVAL = 4
    TICK = 5


@dataclass(frozen=True, slots=True)
class SimConfig:
    tick_s: int = 60
    # While cycles change nothing and no event comes, the retry interval doubles up to this:
    # time alone only matters through the engine's wait thresholds (minimum runtime before
    # preemption, head starvation), which this bounds how late it can notice.
    idle_tick_max_s: int = 900
    # 0: a cycle at every instant something happens; N: one cycle per N-second period (events
    # inside a period wait for its end, as with a scheduler that runs on a timer). Completions
    # still happen at their own time.
    batch_s: int = 0
    # Above EXACT_SLICES slices, fragmentation is sampled at most this often (and ~2,000 times
    # over the arrivals at most).
    fragmentation_sample_s: int = 600
    horizon_s: int | None = None  # stop here even if work remains (None: run until done)
    # Dynamic MIG: a repartitioned GPU's new instances are unavailable this long (the MIG
    # manager creates them; NVIDIA's tools take tens of seconds to minutes per GPU).
    mig_reconfigure_s: int = 60
    max_cycles: int = 1_000_000
    # After every cycle, check every rule (engine.invariants) and stop at the first broken one:
    # costs a walk over the cluster per cycle, so it is for CI and debugging.
    check_invariants: bool = False
    # GPUs that fail during the run (sim/run/failures.py): what runs on them starts over, and
    # they take no work until repaired.
    gpu_failures: tuple[GpuFailure, ...] = ()
    # How a classed failure is handled (gpucarve's gpuHealth: drain and remedy by class);
    # None: as without gpucarve, every failure waits for a person (repair_s) and its work is
    # lost
    gpu_health: GpuHealth | None = None
    # The trace's idle model: workload id -> seconds into each of its runs after which its
    # GPUs sit idle to its end (its useful work done: a notebook left open, an endpoint
    # without traffic). Sorted pairs; absent: busy throughout.
    idle_after: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class Interval:
    """One uninterrupted run of a workload, for metrics."""

    workload: str
    queue: str
    start: int
    end: int
    pods: tuple[PodAssignment, ...]
    # "completed" | "evicted" | "failed" (its GPU failed) | "cut" (running at the horizon)
    # | "reclaimed-idle" (an idleness rule took its GPUs once its work was done)
    outcome: str


@dataclass
class SimResult:
    policy: Policy
    end: int
    submitted: dict[str, Workload] = field(default_factory=dict)
    intervals: list[Interval] = field(default_factory=list)
    first_start: dict[str, int] = field(default_factory=dict)
    completed: dict[str, int] = field(default_factory=dict)
    evictions: list[tuple[int, str, str, str]] = field(default_factory=list)  # t, victim, by, cause
    cycles: int = 0
    never_started: list[str] = field(default_factory=list)
    held_incomplete: set[str] = field(default_factory=set)  # gangs that held GPUs part-placed
    # (time, stranded milli-GPU per pool) samples; see sim/run/fragmentation.py
    fragmentation: list[tuple[int, dict[str, float]]] = field(default_factory=list)
    repartitions: list[tuple[int, str, str]] = field(default_factory=list)  # t, GPU, reason
    # (time, the cycle's idle shares) after every cycle, and (time, None) where an instant
    # passes with nothing waiting (all that is free then is nothing-waiting); see sim/run/idle.py
    idle: list[tuple[int, tuple[Idle, ...] | None]] = field(default_factory=list)
    # t, GPU, when repaired (None: still out at the end), the workloads it stopped
    gpu_failures: list[tuple[int, str, int | None, tuple[str, ...]]] = field(default_factory=list)
    gpu_failure_classes: list[str] = field(default_factory=list)  # beside gpu_failures
    idle_after: dict[str, int] = field(default_factory=dict)  # SimConfig.idle_after
    # workloads an idleness rule reclaimed -> (seconds of idle holding that ended early, the
    # pods it held)
    idle_reclaimed: dict[str, tuple[float, tuple[PodAssignment, ...]]] = field(default_factory=dict)
