"""What the cycle keys its memos and reasons by: a gang's shape (two workloads of one shape fit
in the same places, so a shape that did not fit is not tried again until capacity is
released) and the reason of the flavor that came closest."""

from __future__ import annotations

from collections.abc import Sequence

from gpucarve.core.workload import Workload
from gpucarve.engine.decisions import PendingReason, Stage
from gpucarve.engine.placement.plugins import PodNeeds

Plan = list[tuple[PodNeeds, int, int]]  # (needs, pods, minimum pods) per pod set


def signature(w: Workload, plan: Plan) -> tuple[object, ...]:
    """The shape of a gang: two workloads with the same shape fit in the same places."""
    return (
        w.topology,
        tuple(
            (
                n.pod_set.gpu,
                n.pod_set.node_selector,
                n.pod_set.affinity,
                n.pod_set.tolerations,
                n.flavor,
                n.slices,
                n.shared_mem,
                n.cpu,
                n.mem,
                c,
                m,
            )
            for n, c, m in plan
        ),
    )


def best_reason(tried: Sequence[PendingReason]) -> PendingReason:
    # The reason of the flavor that came closest: placement beats quota beats queueing.
    rank = {
        Stage.PLACEMENT: 0,
        Stage.PREEMPTION: 1,
        Stage.QUOTA: 2,
        Stage.QUEUEING: 3,
        Stage.VALIDATION: 4,
    }
    return sorted(tried, key=lambda r: rank[r.stage])[0]
