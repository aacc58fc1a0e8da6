"""Gang timeouts: a gang running short of its minimum (a pod failed or was deleted, or pods
were bound before a crash) holds GPUs it cannot use. Once it has been short for its timeout,
every pod it still runs is released (an eviction with cause `timeout`) and the gang waits to be
placed whole again; the pods still waiting say why.

The timeout is the workload's (`scheduleTimeoutSeconds`, from its PodGroup); without one, a
preemptible gang gets one by its size, as the seed's guidance has it: 10 min up to 8 GPUs,
15 min up to 31, 30 min from 32. A non-preemptible gang without an explicit timeout keeps what it
holds (its priority class promises it is not evicted).
"""

from __future__ import annotations

from gpucarve.core.snapshot import Snapshot
from gpucarve.core.workload import GpuKind, PartialGang, Workload
from gpucarve.engine import preemption
from gpucarve.engine.decisions import Cause, Eviction, Pending, PendingReason, Plugin, Stage
from gpucarve.engine.state import CycleState


def gang_gpus(w: Workload) -> int:
    """GPUs of a workload for its default timeout: whole GPUs as asked, one per pod of a
    MIG, shared or fractional request."""
    return sum(
        ps.count * (ps.gpu.count if ps.gpu.kind is GpuKind.WHOLE else 1)
        for ps in w.pod_sets
        if ps.gpu.kind is not GpuKind.NONE
    )


def default_timeout_s(gpus: int) -> int:
    if gpus <= 8:
        return 600
    if gpus < 32:
        return 900
    return 1800


def timeout_of(w: Workload, gpus: int) -> int | None:
    if w.timeout_s is not None:
        return w.timeout_s
    return default_timeout_s(gpus) if w.preemptible else None


def expire(snapshot: Snapshot, now: int) -> tuple[list[Eviction], list[Pending]]:
    """The partial gangs past their timeout (released), and why their waiting pods wait;
    partial gangs still within it, or never timed out, say so on their waiting pods."""
    evictions: list[Eviction] = []
    pending: list[Pending] = []
    if not snapshot.partial:
        return evictions, pending
    for rw in sorted(snapshot.running, key=lambda r: r.workload.id):
        part = snapshot.partial.get(rw.workload.id)
        if part is None or rw.terminating:
            continue
        w = rw.workload
        limit = timeout_of(w, part.gpus)
        short = now - part.since
        if limit is None or short < limit:
            continue
        message = _message(w, part, len(rw.pods), short, limit)
        evictions.append(Eviction(w.id, w.queue, Cause.TIMEOUT, w.id, message))
        if part.rest is not None:
            reason = PendingReason(Stage.QUEUEING, Plugin.GANG_TIMEOUT, message)
            pending.append(Pending(part.rest, w.queue, reason))
    return evictions, pending


def _message(w: Workload, part: PartialGang, running: int, short: int, limit: int) -> str:
    source = "scheduleTimeoutSeconds" if w.timeout_s is not None else "the default for its size"
    return (
        f"gang {w.id} ran {running} pods, {part.missing} short of its minimum, for {short} s "
        f"(timeout {limit} s, {source}): its pods are released so that it is placed whole"
    )


def release(c: CycleState) -> set[str]:
    """Release the gangs past their timeout in the cycle's working state (their slices and
    quota are free for what follows, which waits for their pods to exit: `evict.waits_for`);
    the ids of their waiting remainders, which this cycle does not place."""
    evictions, pending = expire(c.snapshot, c.now)
    if not evictions:
        return set()
    by_id = {rw.workload.id: rw for rw in c.snapshot.running}
    for e in evictions:
        preemption.evict(c.ws, by_id[e.workload])
    for e in evictions:
        c.decided.evict(e)
    for p in pending:
        c.decided.wait(p)
    return {p.workload for p in pending}
