"""What the scheduler writes into each Queue's status after a cycle: workloads admitted and
pending, and slices used and borrowed (beyond nominal) per flavor; GPUs per GPU unit; with a
half-life, what each queue borrowed recently (`fairShare`), which a scheduler that starts to
lead, and `gpucarve explain` on a cluster, read back (`usage_as_kept`)."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from gpucarve.core.amounts import FlavorName, as_key
from gpucarve.core.policy import Policy
from gpucarve.core.usage import UsageBook
from gpucarve.core.vocabulary import GROUP, VERSION
from gpucarve.core.workload import RunningWorkload, Workload
from gpucarve.engine import Held, Quotas, evicted_pods, usage_after
from gpucarve.engine.decisions import CycleResult
from gpucarve.kube.api.client import ApiError, Client

log = logging.getLogger("gpucarve.scheduler")


def queue_statuses(
    policy: Policy,
    running: Sequence[RunningWorkload],
    result: CycleResult,
    also_pending: Sequence[Workload] = (),
    held: Held | None = None,
    epoch_s: int = 0,
) -> dict[str, dict[str, Any]]:
    """Per queue of the policy, its status after `result` (evictions gone, admissions in);
    `also_pending`: workloads kept out of the cycle (waiting for their victims to exit).
    `held`: what the engine that ran the cycle says the queues hold after it
    (`Engine.held`), which spares a pass over `running`. `epoch_s`: the time (seconds since
    1970) the cycle's seconds count from, for the usage book's `asOf`."""
    pending: Counter[str] = Counter()
    usage: dict[str, Counter[FlavorName]] = {q.name: Counter() for q in policy.queues}
    after = Counter(held.slices) if held is not None else usage_after(running, result)
    for (queue, flavor), n in after.items():
        usage[queue][flavor] += n
    quotas = Quotas(policy, dict(after))
    admitted = Counter(held.running) if held is not None else _admitted(running, result)
    for pend in result.pending:
        pending[pend.queue] += 1
    for w in also_pending:
        pending[w.queue] += 1
    out: dict[str, dict[str, Any]] = {}
    for q in policy.queues:
        used: dict[str, int | float] = dict(usage[q.name].items())
        borrowed: dict[str, int | float] = {}
        keys = {x.flavor for x in q.quotas} | {
            as_key(f) for f in usage[q.name] if not quotas.has_quota(q.name, f)
        }
        for key in keys:
            unit = policy.units.get(key)
            if unit is not None:
                # a GPU unit's figures are GPUs (its flavors' slices are listed too)
                used[key] = quotas.used(q.name, key) / unit.parts_per_gpu
            over = quotas.borrowed(q.name, key)
            if over > 0:
                borrowed[key] = over if unit is None else over / unit.parts_per_gpu
        out[q.name] = {
            "admittedWorkloads": admitted[q.name],
            "pendingWorkloads": pending[q.name],
            "usage": dict(sorted(used.items())),
            "borrowed": dict(sorted(borrowed.items())),
        }
        if result.usage is not None:
            # where a restarted scheduler, or a new leader, goes on from (core.usage)
            fair = result.usage.to_status(q.name)
            out[q.name]["fairShare"] = fair | {"asOf": max(0, fair["asOf"] + epoch_s)}
    return out


def _admitted(running: Sequence[RunningWorkload], result: CycleResult) -> Counter[str]:
    """Running workloads per queue once `result` holds."""
    admitted: Counter[str] = Counter()
    gone = evicted_pods(result)
    ran = {rw.workload.id for rw in running}
    for rw in running:
        if not (rw.workload.id in gone and gone[rw.workload.id] is None):
            admitted[rw.workload.queue] += 1  # a gang that only gave back its surplus runs on
    for a in result.admissions:
        if a.workload not in ran:  # not a running gang that grew
            admitted[a.queue] += 1
    return admitted


def usage_as_kept(client: Client, policy: Policy, epoch: datetime) -> UsageBook:
    """The usage book as the Queues' statuses keep it, in seconds from `epoch` (a leader that
    went away, or this process before a restart, wrote it); empty without a half-life, or
    when the Queues cannot be read (their work then only turns earlier)."""
    if policy.scheduling.usage_half_life_s is None:
        return UsageBook()
    try:
        listed = client.get(f"/apis/{GROUP}/{VERSION}/queues")
    except ApiError as exc:
        log.warning("queues' fair-share usage not read, starting from none: %s", exc)
        return UsageBook()
    kept = {
        str(item.get("metadata", {}).get("name")): item.get("status", {}).get("fairShare", {})
        for item in listed.get("items", [])
        if isinstance(item, dict)
    }
    book = UsageBook.from_statuses({q: v for q, v in kept.items() if isinstance(v, dict)})
    if book.as_of is None:
        return book
    return UsageBook(book.as_of - int(epoch.timestamp()), book.decayed, book.held)
