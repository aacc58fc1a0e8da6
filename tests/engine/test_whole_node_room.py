"""The fragmentation model keeps a node whole for the shape it was bought for before any pod of
that shape is seen: two small 1-GPU pods go to a 96-CPU node, not to the only 128-CPU one. The
same scenario on a real API server is tests/integration/test_whole_node_room.py."""

from __future__ import annotations

import pytest

from tests.engine.builders import cycle, policy, pool, queue, snapshot, workload


@pytest.mark.parametrize(
    "scoring", [None, {"fragmentation": 1, "binpack": 0}], ids=["default", "model-alone"]
)
def test_small_pods_leave_the_only_big_node_whole(scoring: dict[str, int] | None) -> None:
    extra = {"scheduling": {"scoring": scoring}} if scoring else {}
    p = policy(
        pools=[
            pool("big", "H100-SXM5-80GB", 1, 8, cpusPerNode=128, memoryGiBPerNode=1024),
            pool("std", "H100-SXM5-80GB", 3, 8, cpusPerNode=96, memoryGiBPerNode=1024),
        ],
        queues=[queue("research", {"h100-full": {"nominal": 32}})],
        **extra,
    )
    # Seen alone, either pod goes to a 96-CPU node by best fit; together, weighing only what
    # it had seen, the model sent both to the 128-CPU node (more CPU beside free GPUs there).
    light = workload(p, "light", "research", gpus=1, cpu="2")
    heavy = workload(p, "heavy", "research", gpus=1, cpu="24", submit=1)
    result, _ = cycle(snapshot(p, [light, heavy]))
    nodes = {a.workload: {x.node for x in a.pods} for a in result.admissions}
    assert nodes == {"research/light": {"std-0"}, "research/heavy": {"std-0"}}
