"""The engine's entry points: `run_cycle` and the reusable `Engine`.

Pure and deterministic: no I/O, no clock (``now`` is given), no randomness; the same snapshot
and ``now`` give the same result. The simulator and the Kubernetes scheduler both call it.
The cycle itself is `gpucarve.engine.cycle`.
"""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from gpucarve.core.amounts import FlavorName
from gpucarve.core.snapshot import Snapshot
from gpucarve.engine.apply import apply
from gpucarve.engine.cycle import Cycle
from gpucarve.engine.decisions import CycleResult
from gpucarve.engine.memo import AcrossCycles
from gpucarve.engine.working import Working


def run_cycle(snapshot: Snapshot, now: int) -> CycleResult:
    """One cycle from scratch. `Engine().run_cycle` gives the same result."""
    return Engine().run_cycle(snapshot, now)


def run_whole_cycle(snapshot: Snapshot, now: int) -> CycleResult:
    """One cycle from scratch that tries every waiting workload, however many pods it places
    (`scheduling.maxPodsPerCycle` lifted): what `plan` and `explain` show, since they answer
    what each workload gets when its turn comes, not how a backlog is cut into cycles."""
    s = snapshot.policy.scheduling
    if s.max_pods_per_cycle is None:
        return run_cycle(snapshot, now)
    policy = dataclasses.replace(
        snapshot.policy, scheduling=dataclasses.replace(s, max_pods_per_cycle=None)
    )
    return run_cycle(dataclasses.replace(snapshot, policy=policy), now)


@dataclass(frozen=True)
class Held:
    """What the queues hold after a cycle (`Engine.held`)."""

    slices: dict[tuple[str, FlavorName], int]  # per (queue, flavor), none zero
    running: dict[str, int]  # running workloads per queue, none zero


class Engine:
    """Runs cycles, keeping the indexed cluster between them.

    Building the engine's view of a cluster costs time in proportion to its size; a driver
    that calls cycles over a long run keeps one Engine, which only applies what changed since
    the last snapshot (freed and taken slices, started and finished workloads). The result is
    the same as `run_cycle` on the same snapshot: the view is a function of the snapshot.

    A cycle's own changes to the view (the slices it took, the victims it released) are kept
    when it returns, so the view is then that of `apply(snapshot, result)`. The simulator
    derives its next snapshot by carrying the result out whole: its first step is `Step.of`
    the result, and only the steps after it are followed, instead of the cycle being undone
    and then redone from the step. A snapshot reached otherwise is compared with that applied
    snapshot instead; a driver that only ever rebuilds its snapshots (the Kubernetes
    scheduler, `rebuilt_views=True`) has the cycle undone and then follows the step its new
    snapshot carries from the one before (`Snapshot.delta`, which the scheduler's view works
    out), or compares the two where it carries none: either costs what changed rather than
    the cluster's size, the comparison with a pass over every allocation and running workload.
    """

    def __init__(self, *, rebuilt_views: bool = False) -> None:
        self._ws: Working | None = None
        self._memo = AcrossCycles()  # what cycles remember of workloads, as long as `_ws` lives
        self._base: Snapshot | None = None
        # the last cycle's result, when the view holds its changes on top of `_base`
        self._kept: CycleResult | None = None
        # A driver whose snapshots are rebuilt, never derived (the Kubernetes scheduler's):
        # each cycle's changes stay in the undo log until the next snapshot comes, and are
        # then undone, so that the next snapshot is compared with `_base` itself. Applying the
        # result to `_base` instead costs a pass over every allocation and running workload
        # of the cluster; undoing costs what the cycle changed.
        self._rebuilt_views = rebuilt_views
        self._undo: int | None = None  # the undo log's checkpoint, while a cycle's is kept

    def _working(self, snapshot: Snapshot) -> Working:
        base, ws = self._base, self._ws
        kept, self._kept = self._kept, None
        undo, self._undo = self._undo, None
        if (
            ws is None
            or base is None
            or base.policy is not snapshot.policy
            or base.cluster.nodes is not snapshot.cluster.nodes
            or base.cluster.slices is not snapshot.cluster.slices
        ):
            ws = Working(snapshot)
            self._memo = AcrossCycles()
        elif base is not snapshot or kept is not None:
            delta = snapshot.delta
            steps = delta.steps_since(base) if delta is not None else None
            if kept is not None:
                if steps and steps[0].of is kept:
                    if undo is not None:
                        ws.commit(undo)
                    steps = steps[1:]
                elif undo is not None:
                    ws.rollback(undo)  # back to `base`, in proportion to what the cycle did
                    ws.running_before.clear()
                else:
                    base, steps = apply(base, kept), None
            try:
                if steps is not None:
                    ws.apply_steps(steps)
                else:
                    ws.sync(base, snapshot)
            except BaseException:
                self._ws = self._base = None  # part followed: the next snapshot indexed anew
                raise
        if snapshot.delta is not None:
            snapshot.delta.forget_earlier()
        self._ws, self._base = ws, snapshot
        return ws

    def follow(self, snapshot: Snapshot) -> None:
        """Bring the indexed cluster up to `snapshot` without running a cycle. Indexing a
        cluster from nothing costs about a second at 20,000 nodes (docs/engine.md, Speed); a
        driver that calls this when it starts, or when the nodes change, keeps that out of the
        next cycle, and so out of the wait of the pods it places."""
        with collector_paused():
            self._working(snapshot)

    def differs_from_fresh(self) -> list[str]:
        """What of the indexed cluster differs from a fresh index of the last snapshot (by
        name): none, or following snapshots went wrong. For checks: a fresh index costs what
        the cluster's size does."""
        if self._ws is None or self._base is None or self._kept is not None:
            return []
        mine, fresh = self._ws.comparable(), Working(self._base).comparable()
        return [k for k in mine if mine[k] != fresh[k]]

    def held(self) -> Held | None:
        """What each queue holds once the last cycle's decisions hold, read from the indexed
        cluster (which keeps them): slices per (queue, flavor), as `usage_after` counts them
        from the snapshot and the result, and running workloads per queue. No pass over what
        runs: at 6,000 running workloads that pass cost the scheduler's queue statuses
        milliseconds. None before the first cycle, or once following a snapshot failed."""
        ws = self._ws
        if ws is None or self._kept is None:
            return None
        usage = {k: n for k, n in ws.usage.items() if n}
        return Held(usage, {q: len(m) for q, m in ws.running_by_queue.items() if m})

    def run_cycle(self, snapshot: Snapshot, now: int) -> CycleResult:
        with collector_paused():
            ws = self._working(snapshot)
            start = ws.checkpoint()
            try:
                result = Cycle(snapshot, now, ws, self._memo).run()
            except BaseException:
                ws.rollback(start)
                ws.running_before.clear()
                raise
            if self._rebuilt_views:
                self._undo = start
            else:
                # Committed while the collector is still off: the undo log is freed now, by
                # reference counting, instead of being walked by the first collection after.
                ws.commit(start)
            self._kept = result
            return result


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector held off for the duration (and put back as it was).

    A cycle allocates millions of short-lived objects; each allocation burst set off
    collections whose oldest generation walks the whole heap, the snapshot's and the working
    state's long-lived objects included: 40 % of a 5,000-node benchmark's time (docs/engine.md,
    Speed). What a cycle leaves without a reference is still freed at once by reference counting;
    only garbage in reference cycles waits for the next collection after the cycle. Decisions do
    not depend on it: the engine defines no finalisers, and the one weak reference it reads (a
    snapshot's parent, `Delta`) is only compared with a snapshot the engine holds itself."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
