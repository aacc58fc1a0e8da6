"""A recorded history replayed in the simulator, and how far the replay is from what the
cluster really did: per workload, the simulated first start minus the recorded one.

The replay runs the history's workloads under one of the simulator's policies (`kube-default`
for a cluster that kube-scheduler binds, `gpucarve` for one gpucarve binds), each with the
duration its last recorded run took. A workload the cluster never started is replayed (it
asked for GPUs) but not compared."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gpucarve.core.policy import Policy
from gpucarve.sim.run.baselines import POLICIES
from gpucarve.sim.run.records import SimConfig, SimResult
from gpucarve.sim.run.runner import Simulator
from gpucarve.sim.traces.trace_io import LoadedTrace


@dataclass(frozen=True)
class StartDiff:
    workload: str
    recorded: int
    simulated: int | None  # None: the replay never started it

    @property
    def diff(self) -> int | None:
        return None if self.simulated is None else self.simulated - self.recorded


@dataclass(frozen=True)
class Fidelity:
    policy: str
    diffs: tuple[StartDiff, ...]
    never_recorded: int  # workloads the cluster never started (replayed, not compared)

    @property
    def compared(self) -> list[int]:
        return [abs(d) for x in self.diffs if (d := x.diff) is not None]

    @property
    def not_simulated(self) -> int:
        return sum(1 for x in self.diffs if x.simulated is None)

    def percentile_abs(self, q: float) -> int | None:
        """The q-th percentile (nearest rank) of the absolute differences, seconds."""
        values = sorted(self.compared)
        if not values:
            return None
        rank = max(1, math.ceil(q * len(values) / 100))
        return values[min(rank, len(values)) - 1]

    def mean_signed(self) -> float | None:
        """The mean of simulated minus recorded: above 0, the simulator starts work late."""
        signed = [d for x in self.diffs if (d := x.diff) is not None]
        return sum(signed) / len(signed) if signed else None

    def as_doc(self, top: int = 20) -> dict[str, object]:
        worst = sorted(
            (x for x in self.diffs if x.diff is not None),
            key=lambda x: (-abs(x.diff or 0), x.workload),
        )[:top]
        return {
            "policy": self.policy,
            "compared": len(self.compared),
            "not_started_in_replay": self.not_simulated,
            "never_started_on_cluster": self.never_recorded,
            "median_abs_s": self.percentile_abs(50),
            "p95_abs_s": self.percentile_abs(95),
            "max_abs_s": max(self.compared, default=None),
            "mean_signed_s": self.mean_signed(),
            "worst": [
                {"workload": x.workload, "recorded_s": x.recorded, "simulated_s": x.simulated}
                for x in worst
            ],
        }


def compare(trace: LoadedTrace, result: SimResult, policy: str) -> Fidelity:
    diffs = []
    never = 0
    for w in trace.workloads:
        rec = trace.recorded.get(w.id)
        if rec is None or not rec.starts:
            never += 1
            continue
        diffs.append(StartDiff(w.id, rec.starts[0], result.first_start.get(w.id)))
    return Fidelity(policy, tuple(diffs), never)


def scheduler_policy(trace: LoadedTrace, ours: Sequence[str] = ("gpucarve",)) -> str:
    """The simulator's policy that matches who bound the recorded work: `gpucarve` when every
    started workload was bound by a scheduler named in `ours`, else `kube-default`."""
    bound_by = {r.scheduler for r in trace.recorded.values() if r.starts}
    return "gpucarve" if bound_by and bound_by <= set(ours) else "kube-default"


def replay(policy: Policy, trace: LoadedTrace, name: str) -> tuple[SimResult, Fidelity]:
    """Run the trace under the simulator's policy `name` and compare its starts."""
    to_policy, to_workloads = POLICIES[name]
    sim = Simulator(
        to_policy(policy), to_workloads(trace.workloads), trace.utilisation, SimConfig()
    )
    result = sim.run()
    return result, compare(trace, result, name)
