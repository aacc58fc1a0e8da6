"""A topology gang's fitting groups and best group, against a walk over every group's nodes."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from gpucarve.core.workload import TopologyMode
from gpucarve.engine.placement.groups import fitting, most_free
from gpucarve.engine.working import Working
from tests.engine.builders import policy, pool, queue, snapshot


@pytest.mark.parametrize("seed", range(8))
def test_fitting_groups_match_a_walk_over_every_group(seed: int) -> None:
    rng = random.Random(seed)
    p = policy(
        pools=[
            pool("a", "H100-SXM5-80GB", 6, 8, topology={"nodesPerRack": 2}),
            pool(
                "b",
                "A100-80GB",
                4,
                2,
                "mig",
                mig={"layout": {"3g.40gb": 2}},
                topology={"nodesPerRack": 3},
            ),
        ],
        queues=[queue("q", {"h100-full": {"nominal": 48}, "a100-mig-3g.40gb": {"nominal": 16}})],
    )
    ws = Working(snapshot(p))
    # take a random part of each node's free slices
    for node in ws.nodes:
        for flavor, gpus in node.gpus.items():
            for g in gpus:
                k = rng.randint(0, len(g.free))
                if k:
                    ws.take(g, k, 0)
            ws.recount(node, flavor)
    groups = ws.groups_for(TopologyMode.RACK)
    assert groups is not None
    for demand in (
        Counter({"h100-full": rng.randint(1, 16)}),
        Counter({"a100-mig-3g.40gb": rng.randint(1, 6)}),
        Counter({"h100-full": rng.randint(1, 12), "a100-mig-3g.40gb": rng.randint(1, 4)}),
    ):
        counts = {f: ws.index[f].count for f in demand}
        rooms = [{f: sum(counts[f].get(n, 0) for n in g) for f in demand} for g in groups]
        expected = [
            (sum(r.values()), g)
            for r, g in zip(rooms, groups, strict=True)
            if all(r[f] >= d for f, d in demand.items())
        ]
        assert fitting(ws, TopologyMode.RACK, groups, demand) == expected
        best = max((sum(r.values()), len(g)) for r, g in zip(rooms, groups, strict=True))
        assert most_free(ws, TopologyMode.RACK, groups, demand) == best
