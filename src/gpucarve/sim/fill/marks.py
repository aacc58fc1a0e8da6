"""The fill experiment's bookkeeping, shared by its runners (`sim/fill/experiment.py`'s
array policies and `sim/fill/engine.py`'s engine path): the allocation ratio and the pods
dropped at each mark."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from gpucarve.sim.fill.trace import Pods

MARKS = (90, 95, 100, 130)  # arrived GPU request, % of capacity


@dataclass(frozen=True)
class FillRun:
    policy: str
    seed: int
    ratio_at: dict[int, float]  # arrived % -> allocation ratio %
    # arrived % -> GPU pods that arrived by then and found no node, by (GPUs, milli per GPU)
    dropped_at: dict[int, dict[tuple[int, int], int]] = field(default_factory=dict)


class Marks:
    """The experiment's bookkeeping, shared by every runner: the allocation ratio and the pods
    dropped when the arrived request crosses each mark."""

    def __init__(self, pods: Pods, capacity: int) -> None:
        self.pods, self.capacity = pods, capacity
        self.requests = pods.request()
        self.arrived = self.allocated = 0
        self.todo = sorted(MARKS)
        self.dropped: Counter[tuple[int, int]] = Counter()
        self.ratio_at: dict[int, float] = {}
        self.dropped_at: dict[int, dict[tuple[int, int], int]] = {}

    def arrive(self, i: int) -> None:
        req = int(self.requests[i])
        while self.todo and self.arrived + req > self.todo[0] / 100 * self.capacity:
            self._close(self.todo.pop(0))
        self.arrived += req

    def placed(self, i: int) -> None:
        self.allocated += int(self.requests[i])

    def drop(self, i: int) -> None:
        if self.pods.num_gpu[i]:
            self.dropped[(int(self.pods.num_gpu[i]), int(self.pods.gpu_milli[i]))] += 1

    def _close(self, mark: int) -> None:
        self.ratio_at[mark] = 100 * self.allocated / self.capacity
        self.dropped_at[mark] = dict(sorted(self.dropped.items()))

    def run(self, policy: str, seed: int) -> FillRun:
        for m in self.todo:
            self._close(m)
        self.todo = []
        return FillRun(policy, seed, self.ratio_at, self.dropped_at)
