"""What the scheduler writes into each Queue's status after a cycle: workloads admitted and
pending, and slices used and borrowed (beyond nominal) per flavor."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from gpucarve.core.policy import Policy
from gpucarve.core.workload import RunningWorkload, Workload
from gpucarve.engine.decisions import CycleResult
from gpucarve.engine.usage import evicted_pods, usage_after


def queue_statuses(
    policy: Policy,
    running: Sequence[RunningWorkload],
    result: CycleResult,
    also_pending: Sequence[Workload] = (),
) -> dict[str, dict[str, Any]]:
    """Per queue of the policy, its status after `result` (evictions gone, admissions in);
    `also_pending`: workloads kept out of the cycle (waiting for their victims to exit)."""
    admitted: Counter[str] = Counter()
    pending: Counter[str] = Counter()
    usage: dict[str, Counter[str]] = {q.name: Counter() for q in policy.queues}
    for (queue, flavor), n in usage_after(running, result).items():
        usage[queue][flavor] += n
    gone = evicted_pods(result)
    ran = {rw.workload.id for rw in running}
    for rw in running:
        if not (rw.workload.id in gone and gone[rw.workload.id] is None):
            admitted[rw.workload.queue] += 1  # a gang that only gave back its surplus runs on
    for a in result.admissions:
        if a.workload not in ran:  # not a running gang that grew
            admitted[a.queue] += 1
    for pend in result.pending:
        pending[pend.queue] += 1
    for w in also_pending:
        pending[w.queue] += 1
    out: dict[str, dict[str, Any]] = {}
    for q in policy.queues:
        used = usage[q.name]
        borrowed = {}
        for flavor, n in used.items():
            quota = q.quota(flavor)
            over = n - (quota.nominal if quota is not None else 0)
            if over > 0:
                borrowed[flavor] = over
        out[q.name] = {
            "admittedWorkloads": admitted[q.name],
            "pendingWorkloads": pending[q.name],
            "usage": dict(sorted(used.items())),
            "borrowed": dict(sorted(borrowed.items())),
        }
    return out
