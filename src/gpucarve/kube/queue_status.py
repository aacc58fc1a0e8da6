"""What the scheduler writes into each Queue's status after a cycle: workloads admitted and
pending, and slices used and borrowed (beyond nominal) per flavor."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from gpucarve.core.policy import Policy
from gpucarve.core.workload import RunningWorkload, Workload
from gpucarve.engine.decisions import CycleResult


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
    evicted = set(result.evicted_ids())
    for rw in running:
        if rw.workload.id in evicted:
            continue
        admitted[rw.workload.queue] += 1
        for p in rw.pods:
            if p.flavor is not None:
                usage[rw.workload.queue][p.flavor] += len(p.slice_ids)
    for a in result.admissions:
        admitted[a.queue] += 1
        for flavor, n in a.charged:
            usage[a.queue][flavor] += n
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
