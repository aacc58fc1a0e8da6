"""What the simulator's event handlers for failing GPUs (`failures`) and MIG changes
(`mig_replay`) may see and do of the running simulator (`runner.Simulator`): its state and the
three ways it changes. They take this port, never the runner, so neither imports the module
that calls it."""

from __future__ import annotations

from typing import Protocol

from gpucarve.core.policy import Policy
from gpucarve.core.snapshot import Snapshot, Step
from gpucarve.core.workload import RunningWorkload
from gpucarve.engine.decisions import CycleResult
from gpucarve.sim.run.allocations import Allocations
from gpucarve.sim.run.fragmentation import FragmentationProbe
from gpucarve.sim.run.records import Kind, SimConfig, SimResult


class SimulatorPort(Protocol):
    policy: Policy
    config: SimConfig
    snapshot: Snapshot
    result: SimResult
    probe: FragmentationProbe
    allocs: Allocations
    live: dict[str, RunningWorkload]
    reconfiguring: dict[str, list[str]]
    out_of_service: dict[str, tuple[int, list[str]]]

    def push(self, t: int, kind: Kind, payload: str) -> None: ...

    def apply_result(self, result: CycleResult, now: int) -> None: ...

    def change_allocations(self, step: Step) -> None: ...

    def flush_finished(self) -> None: ...
