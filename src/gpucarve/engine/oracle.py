"""Questions asked of the engine outside a cycle: whether a workload can ever run on the
policy's cluster, whatever frees up. The webhook asks it at admission, with the engine's own
state on the policy's cluster with nothing running, built once per policy."""

from __future__ import annotations

from gpucarve.core.cluster import build_cluster
from gpucarve.core.policy import Policy
from gpucarve.core.snapshot import Snapshot
from gpucarve.core.workload import Workload
from gpucarve.engine.admit import never_fits
from gpucarve.engine.decisions import PendingReason
from gpucarve.engine.memo import AcrossCycles
from gpucarve.engine.state import CycleState
from gpucarve.engine.working import Working

MEMO_LIMIT = 10_000  # memo entries kept between questions: one per workload asked about


class Oracle:
    """The engine on `policy`'s cluster with nothing running. Not safe for two threads at
    once (its memos are shared): a caller that asks from threads holds a lock."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        snapshot = Snapshot(policy, build_cluster(policy), (), ())
        self._memo = AcrossCycles()
        self._state = CycleState(snapshot, 0, Working(snapshot), self._memo)

    def never_fits(self, w: Workload) -> tuple[PendingReason, ...]:
        """Why `w` can never run under the policy on its cluster, whatever frees up (empty:
        it may); the same answer admission gives in a cycle (`admit.never_fits`)."""
        self._memo.trim(MEMO_LIMIT)  # bounded, however many workloads are asked about
        return never_fits(self._state, w)
