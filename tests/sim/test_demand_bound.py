"""The demand bound: a pool's work replayed on a perfectly packed pot of its GPUs."""

from __future__ import annotations

from gpucarve.sim.recommend.demand_bound import demand_bound
from tests.engine.builders import policy, pool, queue, workload


def test_work_that_does_not_fit_waits_and_later_work_backfills() -> None:
    p = policy(
        pools=[pool("train", "H100-SXM5-80GB", 1, 2), pool("inf", "A100-80GB", 1, 1, "mig",
                                                           mig={"layout": {"3g.40gb": 2}})],
        queues=[queue("q", {"h100-full": {"nominal": 2}, "a100": {"nominal": 1}})],
    )  # fmt: skip
    ws = [
        workload(p, "both", "q", gpus=2, duration=100),  # fills the pot until 100
        workload(p, "one", "q", gpus=1, duration=100),  # waits, runs 100..200
        workload(p, "late", "q", gpus=1, submit=150, duration=400),  # backfills at 150
        # three 3g.40gb (half a GPU each) on one A100: two at once, the third from 50
        workload(p, "m", "q", mig="3g.40gb", pods=3, min_pods=1, duration=50),
    ]
    bound = demand_bound(p, ws, (0, 300))
    # train: 2 × 100 + 1 × 100 + 1 × 150 (clipped at 300) GPU-seconds over 300 s
    assert bound["train"] == round((200 + 100 + 150) / 300, 2)
    # a pod set is one job: three 3g.40gb need 1.5 GPUs and never fit the one A100
    assert bound["inf"] == 0.0
    ws[-1] = workload(p, "m", "q", mig="3g.40gb", pods=2, duration=50)
    charge = 2 * 0.496  # two 3g.40gb, each its dominant share of the A100
    assert abs(demand_bound(p, ws, (0, 300))["inf"] - round(charge * 50 / 300, 2)) < 0.011
