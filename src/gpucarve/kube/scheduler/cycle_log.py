"""What the cycles bound and evicted, in the log at a pace a reader can follow.

Under a stream of pods the loop runs a hundred cycles a second; a line for each was a write
from the loop's thread every few milliseconds, and each write gave the interpreter's lock away
to the binder's and informers' threads, which kept it for up to their switch interval (in a
profile of the paced binding bench, an eighth of a cycle's samples were that line). The first
cycle that binds or evicts after a quiet spell is written at once, as before; later ones are
summed into one line at most every `every_s`, written by the first cycle after that (any
cycle: the loop runs one at least every `SchedulerConfig.interval_s` while pods wait).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

log = logging.getLogger("gpucarve.scheduler")

EVERY_S = 10.0


class CycleLog:
    """`clock`: monotonic seconds (pacing only)."""

    def __init__(self, clock: Callable[[], float], every_s: float = EVERY_S) -> None:
        self._clock = clock
        self.every_s = every_s
        self._at: float | None = None  # when the last line was written
        self._cycles = self._bound = self._evicted = 0  # summed since that line
        self._first = self._last = 0  # the first and last cycle summed

    def cycle(self, number: int, bound: int, evicted: int, pending: int) -> None:
        """Cycle `number` started `bound` bindings and `evicted` evictions; `pending`
        workloads wait after it."""
        if bound or evicted:
            if not self._cycles:
                self._first = number
            self._cycles += 1
            self._bound += bound
            self._evicted += evicted
            self._last = number
        if not self._cycles:
            return
        now = self._clock()
        if self._at is not None and now - self._at < self.every_s:
            return
        if self._cycles == 1:
            log.info(
                "cycle %d: %d pods bound, %d workloads evicted, %d pending",
                self._last, self._bound, self._evicted, pending,
            )  # fmt: skip
        else:
            log.info(
                "cycles %d-%d: %d pods bound, %d workloads evicted in %d cycles, %d pending",
                self._first, self._last, self._bound, self._evicted, self._cycles, pending,
            )  # fmt: skip
        self._at = now
        self._cycles = self._bound = self._evicted = 0
