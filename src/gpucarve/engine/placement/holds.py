"""What a waiting gang's reservation keeps on one node (engine.reservation works it out; the
placer keeps other work to what it allows)."""

from __future__ import annotations

from dataclasses import dataclass

from gpucarve.core.workload import Workload


def senior(head: Workload, w: Workload) -> bool:
    """Whether `head` comes before `w`: higher priority, or the same and submitted first (by
    id when submitted the same second). Only work `head` is senior to is kept off its hold."""
    return head.priority > w.priority or (
        head.priority == w.priority and (head.submit_time, head.id) <= (w.submit_time, w.id)
    )


@dataclass(slots=True)
class Hold:
    """What a reservation keeps on one node for one flavor."""

    head: Workload
    start: int  # when the gang is expected to fit
    need: int  # slices of the flavor the gang needs free here at `start`
    releasing: int  # slices of the flavor that work running here is expected to free by then
    shared: bool  # a shared flavor's free count is per GPU: no budget, only early enders
    # The gang's queue uses part of its nominal quota, so the gang needs a loan until that
    # work ends: it does not keep out work within its own queue's nominal quota (the lenders'
    # guarantee comes before a loan; without this, lenders wait and then reclaim).
    borrows: bool = False

    def allows(self, ends_at: int, slices: int, free: int) -> bool:
        """Whether a workload expected to end at `ends_at` may take `slices` of the `free`
        slices of the flavor on this node now."""
        if ends_at <= self.start:
            return True
        return not self.shared and free - slices + self.releasing >= self.need
