"""Garbage collection between the scheduler's cycles, not inside them.

CPython collects its youngest generation once allocations outnumber deallocations by a
threshold. The engine holds collection off inside a cycle (`collector_paused`), so the first
allocation after a cycle met a young generation holding all that the cycle, the view and the
informers had left alive: at 5,000 nodes, binding 100 pods a second (`bench/bind.py`), such a
collection took 35 ms on average and up to 96 ms, and a pod that arrived meanwhile waited for
it (a twentieth of a second in a p99 of 0.15 s). Each cycle also leaves some garbage in
reference cycles (about 45 objects), so collection cannot simply stay off.

While its loop runs, the scheduler turns automatic collection off and collects itself after
each cycle, in the rest the loop takes anyway (`loop.rest_s`): the young generation then holds
one cycle's survivors (0.3 ms median, 3 ms at p99 in a run timing each collection), the
middle one is collected every `MIDDLE_EVERY` cycles (3 ms on average), and the whole heap,
which holds every pod and node the informers cache (0.7 s at 6,000 pods), when the loop
wakes from a quiet spell (no change for a whole wait) and the last whole collection is
`WHOLE_QUIET_S` old, or at the latest every `WHOLE_LATEST_S`: rare, as CPython's own
thresholds made it for this process (`kube/scheduler/process.py`), and at a moment when little
waits.

What the process holds when the loop starts (the informers' first lists: every node and pod)
is collected once and then frozen (`gc.freeze`), and so is what the first cycle built (the
engine's index of the whole cluster): no young or middle collection walks it again,
and the whole heap's collection unfreezes it, collects, and freezes what survived, so each
young and middle collection walks only what is newer than the last whole one. At 5,000 nodes
the first middle collection of a paced run walked those lists and took 136 ms, and the pods
that arrived meanwhile waited for it.

No collection starts while bindings are in flight (up to `DEFER_AT_MOST` cycles in a row): it
holds every thread of the process, the binder's too, and a gang whose bindings it stopped
half-way shows bound in part for as long as it lasts.
"""

from __future__ import annotations

import gc
from collections.abc import Callable

MIDDLE_EVERY = 50  # cycles between collections of the middle generation (CPython's count)
WHOLE_QUIET_S = 300.0  # a quiet spell collects the whole heap once this long has passed
WHOLE_LATEST_S = 1800.0  # and the whole heap is collected at least this often
DEFER_AT_MOST = 20  # cycles in a row that may skip collection while bindings are in flight


class Collector:
    """Collection paced by the loop (`begin` … `after_cycle` … `end`). `clock` is monotonic
    seconds (pacing only, never read by a decision)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._cycles = 0
        self._deferred = 0
        self._whole_at = 0.0
        self._was_enabled = False
        self.seen = 0  # the cycles it was told of

    def begin(self) -> None:
        self._was_enabled = gc.isenabled()
        gc.disable()
        self._whole()
        self._whole_at = self._clock()

    def end(self) -> None:
        gc.unfreeze()
        if self._was_enabled:
            gc.enable()

    @staticmethod
    def _whole() -> None:
        """The whole heap, frozen objects too; what survives is frozen."""
        gc.unfreeze()
        gc.collect(2)
        gc.freeze()

    def after_cycle(self, quiet: bool, binding: bool = False) -> int | None:
        """Collect what the cycle left: the generation collected (0, 1 or 2), or None when
        bindings are in flight (`binding`) and the collection waits for a later cycle.
        `quiet`: the loop woke because its wait ran out, not for a change."""
        self.seen += 1
        if binding and self._deferred < DEFER_AT_MOST:
            self._deferred += 1
            return None
        self._deferred = 0
        self._cycles += 1
        since = self._clock() - self._whole_at
        # the first cycle indexed the whole cluster for the engine: frozen with the rest
        first = self._cycles == 1
        if first or since >= WHOLE_LATEST_S or (quiet and since >= WHOLE_QUIET_S):
            generation = 2
            self._whole_at = self._clock()
        elif self._cycles % MIDDLE_EVERY == 0:
            generation = 1
        else:
            generation = 0
        if generation == 2:
            self._whole()
        else:
            gc.collect(generation)
        return generation
