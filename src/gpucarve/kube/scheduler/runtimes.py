"""How long work of each kind ran on the cluster, learned as the scheduler sees it end, for the
reservations (`core.runtime`): a workload that ran in one cycle and is gone in the next, every
one of its pods Succeeded, is a run. Work that was evicted, deleted or failed is not (it did not
finish). The book lives as long as the scheduler; a restart starts it empty, and declarations
(`gpucarve.io/expected-runtime`, activeDeadlineSeconds) and the policy's default serve meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from gpucarve.core.runtime import RuntimeBook
from gpucarve.core.snapshot import Snapshot
from gpucarve.core.workload import RunningWorkload, Workload

PhaseOf = Callable[[str], str | None]  # pod (namespace/name) -> its phase; None: gone
Finished = Callable[[Workload, int, int], None]  # (workload, started, ended)


class RuntimeLearner:
    def __init__(self, finished: Finished | None = None) -> None:
        self.book = RuntimeBook()
        self.finished = finished
        self._running: dict[str, tuple[RunningWorkload, tuple[str, ...]]] = {}

    def observe(
        self,
        snapshot: Snapshot,
        running_pods: Mapping[str, tuple[str, ...]],
        phase_of: PhaseOf,
        now: int,
    ) -> None:
        """Record the runs that ended since the last cycle; remember what runs now."""
        current = {rw.workload.id: rw for rw in snapshot.running}
        for wid, (rw, pods) in self._running.items():
            if wid in current or not pods:
                continue
            if all(phase_of(p) == "Succeeded" for p in pods):
                self.book.record(rw.workload, now - rw.start_time)
                if self.finished is not None:
                    self.finished(rw.workload, rw.start_time, now)
        self._running = {wid: (rw, running_pods.get(wid, ())) for wid, rw in current.items()}
