"""How long work is expected to run once started: by its deadline if something stops it then,
else what finished work of its kind took (or the policy's conservative default), lengthened by
what it claims but never shortened: a claim binds nothing.

Reservations need it: a gang that waits for room gets the nodes where it fits soonest, judged by
when what runs there is expected to end, and other work may use those nodes meanwhile only if
it is expected to end first. The simulator must not read a workload's true duration to judge
this, so the book learns only from work that finished, as a scheduler on a cluster does.

The driver (the simulator, the Kubernetes scheduler) owns the book and records each completion;
a snapshot refers to it as it stood when the snapshot was handed to the engine. The same record
of completions in the same order gives the same estimates.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable

from gpucarve.core.workload import Workload

# Recent runs kept per kind of work, the fewest that make an estimate, and which quantile of
# them is the estimate: a high one, since a reservation trusts it to end on time.
SAMPLES = 32
MIN_SAMPLES = 3
QUANTILE = 0.8
# Kinds of work remembered at most (the oldest kind seen is forgotten first): a long-lived
# scheduler sees shapes come and go.
MAX_KINDS = 4096


# how a reason names where an expected end came from (`RuntimeBook.expected`'s second value)
WHENCE = {
    "deadline": "its deadline",
    "learned": "its learned runtime",
    "declared": "the runtime it declares",
    "default": "the default runtime",
}


def kind_of(w: Workload) -> Hashable:
    """Work of one kind: same queue and priority, and pod sets of the same size and request
    (a team's 8-GPU fine-tunes, its 2-GPU experiments)."""
    return (w.queue, w.priority, tuple((ps.count, ps.gpu) for ps in w.pod_sets))


class RuntimeBook:
    """Runs of finished work by kind, and the estimate they give."""

    def __init__(self) -> None:
        self._runs: dict[Hashable, deque[int]] = {}
        self._estimates: dict[Hashable, int | None] = {}

    def record(self, w: Workload, seconds: int) -> None:
        """A run of `w` that finished after `seconds` of running (work that was evicted or
        lost its GPU is not a run: it did not finish)."""
        k = kind_of(w)
        runs = self._runs.pop(k, None)
        if runs is None:
            runs = deque(maxlen=SAMPLES)
            if len(self._runs) >= MAX_KINDS:
                oldest = next(iter(self._runs))
                del self._runs[oldest]
                self._estimates.pop(oldest, None)
        runs.append(max(0, seconds))
        self._runs[k] = runs  # most recently seen last
        self._estimates.pop(k, None)

    def learned(self, w: Workload) -> int | None:
        """What finished work of `w`'s kind took (a high quantile of its recent runs), or None
        while fewer than MIN_SAMPLES runs are known."""
        k = kind_of(w)
        if k in self._estimates:
            return self._estimates[k]
        runs = self._runs.get(k)
        estimate = None
        if runs is not None and len(runs) >= MIN_SAMPLES:
            ordered = sorted(runs)
            estimate = ordered[min(len(ordered) - 1, int(QUANTILE * len(ordered)))]
        self._estimates[k] = estimate
        return estimate

    def expected(self, w: Workload, default: int) -> tuple[int, str]:
        """Seconds `w` is expected to run and whence. A deadline that stops it (`deadline`)
        bounds it for sure. Otherwise what finished work of its kind took (`learned`), or
        `default` before enough has; a claim (`declared`) may only lengthen that: nothing
        stops work that claimed less, so a short claim would let it jump a reservation."""
        if w.runtime_limit_s is not None:
            return w.runtime_limit_s, "deadline"
        learned = self.learned(w)
        base, source = (learned, "learned") if learned is not None else (default, "default")
        if w.expected_runtime_s is not None and w.expected_runtime_s > base:
            return w.expected_runtime_s, "declared"
        return base, source

    def __len__(self) -> int:
        return sum(len(r) for r in self._runs.values())
