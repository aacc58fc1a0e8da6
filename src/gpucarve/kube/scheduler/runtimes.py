"""How long work of each kind ran on the cluster, learned as the scheduler sees it end, for the
reservations (`core.runtime`): a workload that ran in one cycle and is gone in the next, every
one of its pods Succeeded, is a run. Work that was evicted, deleted or failed is not (it did not
finish). The book lives as long as the scheduler; a restart starts it empty, and declarations
(`gpucarve.io/expected-runtime`, activeDeadlineSeconds) and the policy's default serve meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping

from gpucarve.core.runtime import RuntimeBook
from gpucarve.core.snapshot import Snapshot
from gpucarve.core.workload import RunningWorkload, Workload

PhaseOf = Callable[[str], str | None]  # pod (namespace/name) -> its phase; None: gone
Finished = Callable[[Workload, int, int], None]  # (workload, started, ended)


class RuntimeLearner:
    def __init__(self, finished: Finished | None = None) -> None:
        self.book = RuntimeBook()
        self.finished = finished
        # the last cycle's running workloads and each one's pods
        self._last: tuple[tuple[RunningWorkload, ...], Mapping[str, tuple[str, ...]]] | None = None

    def observe(
        self,
        snapshot: Snapshot,
        running_pods: Mapping[str, tuple[str, ...]],
        phase_of: PhaseOf,
        now: int,
        maybe_gone: Collection[str] | None = None,
    ) -> None:
        """Record the runs that ended since the last cycle; remember what runs now. A cycle
        in which nothing ended costs no pass over what runs. `maybe_gone`: the workloads that
        may have ended since (`view_step.maybe_gone`), when the caller knows them; else the
        two cycles' running workloads are compared."""
        last, self._last = self._last, (snapshot.running, running_pods)
        if last is None:
            return
        ran, pods_of = last
        if maybe_gone is None:
            gone = pods_of.keys() - running_pods.keys()
        else:
            gone = {w for w in maybe_gone if w in pods_of and w not in running_pods}
        if not gone:
            return
        for rw in ran:  # in the snapshot's order, as the book always heard them
            pods = pods_of.get(rw.workload.id, ()) if rw.workload.id in gone else ()
            if pods and all(phase_of(p) == "Succeeded" for p in pods):
                self.book.record(rw.workload, now - rw.start_time)
                if self.finished is not None:
                    self.finished(rw.workload, rw.start_time, now)
