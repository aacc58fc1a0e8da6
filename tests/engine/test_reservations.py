"""Reservations with runtime-aware backfill, the runtime book they judge by, the queue hold that
counts usage, and reclaim that spares gangs many times the reclaimer's size."""

from __future__ import annotations

import dataclasses
from typing import Any

from gpucarve.core.policy import Policy
from gpucarve.core.runtime import MIN_SAMPLES, RuntimeBook
from gpucarve.core.snapshot import Snapshot
from gpucarve.core.workload import Workload
from gpucarve.engine.apply import finish
from gpucarve.engine.decisions import Plugin, Stage
from tests.engine.builders import (
    cycle,
    policy,
    pool,
    queue,
    snapshot,
    submit,
    workload,
)

RESERVE = {"reserveAfterSeconds": 100, "minRuntimeSeconds": 0}


def expecting(w: Workload, seconds: int) -> Workload:
    """`w` with a deadline (a pod's activeDeadlineSeconds): it ends by then."""
    return dataclasses.replace(w, runtime_limit_s=seconds)


def claiming(w: Workload, seconds: int) -> Workload:
    """`w` with a claimed runtime (the annotation): nothing stops it running longer."""
    return dataclasses.replace(w, expected_runtime_s=seconds)


# a second H100 node nothing tolerates: capacity for both queues' nominal quotas, never used
SPARE = pool(
    "spare",
    "H100-SXM5-80GB",
    1,
    8,
    taints=[{"key": "spare", "value": "x", "effect": "NoSchedule"}],
)


def one_node(**scheduling: Any) -> Policy:
    return policy(
        pools=[pool("train", "H100-SXM5-80GB", 1, 8), SPARE],
        queues=[
            queue("r", {"h100-full": {"nominal": 8}}),
            queue("o", {"h100-full": {"nominal": 8}}),
        ],
        scheduling=scheduling,
    )


def half_busy(p: Policy, ends_in: int) -> Snapshot:
    """One 8-GPU node: o/a runs on 4 GPUs from t=0, expected to run `ends_in` seconds; r/big
    (8 GPUs) waits from t=10."""
    s = snapshot(p, [expecting(workload(p, "a", "o", gpus=4), ends_in)])
    _, s = cycle(s)
    return submit(s, workload(p, "big", "r", gpus=8, submit=10))


def test_the_runtime_book_prefers_declarations_then_learns_a_high_quantile() -> None:
    p = one_node()
    book = RuntimeBook()
    w = workload(p, "x", "r", gpus=2)
    assert book.expected(w, 5000) == (5000, "default")
    for seconds in range(100, 100 * MIN_SAMPLES, 100):
        book.record(workload(p, f"x{seconds}", "r", gpus=2), seconds)
    assert book.expected(w, 5000) == (5000, "default")  # one run short of an estimate
    book.record(workload(p, "last", "r", gpus=2), 1000)
    assert book.learned(w) == 1000  # the high quantile, not the mean
    assert book.expected(w, 5000) == (1000, "learned")
    # another kind (other size) learns nothing from these
    assert book.expected(workload(p, "y", "r", gpus=4), 5000) == (5000, "default")
    # a deadline bounds it; a claim may lengthen what history says, never shorten it
    assert book.expected(expecting(w, 42), 5000) == (42, "deadline")
    assert book.expected(claiming(w, 3000), 5000) == (3000, "declared")
    assert book.expected(claiming(w, 42), 5000) == (1000, "learned")


def test_a_reserving_gang_lets_through_only_work_that_ends_before_it_starts() -> None:
    p = one_node(**RESERVE)
    s = half_busy(p, ends_in=1000)
    quick = expecting(workload(p, "quick", "o", gpus=2, submit=20), 500)
    slow = expecting(workload(p, "slow", "o", gpus=2, submit=21), 5000)
    result, _ = cycle(submit(s, quick, slow), now=200)
    assert result.admitted_ids() == ["o/quick"]
    (res,) = result.reservations
    assert (res.workload, res.start, res.nodes, res.waits_for) == (
        "r/big",
        1000,
        ("train-0",),
        ("o/a",),
    )
    big = result.pending_reason("r/big")
    assert big is not None and big.plugin is Plugin.RESERVATION
    assert "reserved train-0" in big.message and "by its deadline" in big.message
    slow_reason = result.pending_reason("o/slow")
    assert slow_reason is not None and "by reservation" in slow_reason.message


def test_without_reservations_the_same_work_fills_the_node() -> None:
    p = one_node(minRuntimeSeconds=0)
    s = half_busy(p, ends_in=1000)
    slow = expecting(workload(p, "slow", "o", gpus=2, submit=21), 5000)
    result, _ = cycle(submit(s, slow), now=200)
    assert result.admitted_ids() == ["o/slow"] and result.reservations == ()


def test_work_that_overruns_moves_the_reservation_and_is_not_stopped() -> None:
    p = one_node(**RESERVE)
    s = half_busy(p, ends_in=1000)
    slow = expecting(workload(p, "slow", "o", gpus=2, submit=21), 600)
    result, _ = cycle(submit(s, slow), now=3000)  # o/a was expected to end at 1000
    (res,) = result.reservations
    assert res.start == 3001 and not result.evictions
    assert result.admitted_ids() == []  # 600 s from now ends after any moment now


def test_work_of_unknown_runtime_is_taken_to_run_the_policy_default() -> None:
    p = one_node(**RESERVE, defaultRuntimeSeconds=400)
    s = half_busy(p, ends_in=1000)
    unknown = workload(p, "unknown", "o", gpus=2, submit=20)
    result, _ = cycle(submit(s, unknown), now=200)
    assert result.admitted_ids() == ["o/unknown"]  # 200 + 400 <= 1000


def test_a_gang_that_fits_now_keeps_its_room_until_its_queues_turn() -> None:
    # o borrows nothing and goes first by fair share; r's gang fits the free node now and
    # keeps it, so o's newer long work waits.
    p = policy(
        pools=[pool("train", "H100-SXM5-80GB", 1, 8)],
        cohorts=[{"name": "c"}],
        queues=[
            queue("r", {"h100-full": {"nominal": 8}}, cohort="c"),
            queue("o", {"h100-full": {"nominal": 0, "borrowingLimit": 8}}, cohort="c"),
        ],
        scheduling=RESERVE,
    )
    big = workload(p, "big", "r", gpus=8, submit=0)
    late = expecting(workload(p, "late", "o", gpus=8, submit=5), 9999)
    result, _ = cycle(snapshot(p, [big, late]), now=200)
    assert result.admitted_ids() == ["r/big"]


def test_a_reservation_keeps_its_queues_quota_for_work_that_ends_after_its_start() -> None:
    # r (nominal 8) runs 4 GPUs until 1000; its 8-GPU head must wait for that. With
    # reservations the head keeps r's quota: r's work that ends before then still runs, work
    # that would run past it waits behind the head.
    p = policy(
        pools=[pool("train", "H100-SXM5-80GB", 2, 8)],
        queues=[queue("r", {"h100-full": {"nominal": 8}})],
        scheduling={**RESERVE, "maxHeadWaitSeconds": 100},
    )
    s = snapshot(p, [expecting(workload(p, "a", "r", gpus=4), 1000)])
    _, s = cycle(s)
    big = workload(p, "big", "r", gpus=8, submit=10)
    quick = expecting(workload(p, "quick", "r", gpus=2, submit=20), 300)
    slow = expecting(workload(p, "slow", "r", gpus=2, submit=21), 5000)
    result, _ = cycle(submit(s, big, quick, slow), now=200)
    assert result.admitted_ids() == ["r/quick"]
    reason = result.pending_reason("r/slow")
    assert reason is not None and reason.stage is Stage.QUEUEING
    assert reason.plugin is Plugin.RESERVATION and "behind r/big" in reason.message
    big_reason = result.pending_reason("r/big")
    assert big_reason is not None and big_reason.stage is Stage.QUOTA


def test_reclaim_spares_a_gang_many_times_its_size_until_the_bound() -> None:
    p = policy(
        pools=[pool("train", "H100-SXM5-80GB", 1, 8)],
        cohorts=[{"name": "c"}],
        queues=[
            queue("r", {"h100-full": {"nominal": 4, "borrowingLimit": 4}}, cohort="c"),
            queue("d", {"h100-full": {"nominal": 4}}, cohort="c"),
        ],
        scheduling={
            "minRuntimeSeconds": 0,
            "reclaimLargeVictimRatio": 4,
            "reclaimLargeVictimAfterSeconds": 1000,
        },
    )
    s = snapshot(p, [workload(p, "gang", "r", gpus=4, pods=2)])
    _, s = cycle(s)
    small = workload(p, "small", "d", gpus=1, submit=100)
    result, _ = cycle(submit(s, small), now=500)  # waited 400 s: the 8-GPU gang is spared
    assert result.evictions == () and result.admitted_ids() == []
    result, _ = cycle(submit(s, small), now=1100)  # past the bound: the guarantee comes
    assert [e.workload for e in result.evictions] == ["r/gang"]
    assert result.admitted_ids() == ["d/small"]
    # a gang at most `ratio` times the reclaimer's size goes at once, as before
    two = workload(p, "two", "d", gpus=2, submit=100)
    result, _ = cycle(submit(s, two), now=500)
    assert [e.workload for e in result.evictions] == ["r/gang"]


def test_reclaim_takes_a_small_borrower_before_a_large_one_that_ran_less() -> None:
    # tests/integration/test_reclaim_grace.py's sparing test, on the engine
    def run(**sparing: Any) -> list[str]:
        p = policy(
            pools=[pool("train", "H100-SXM5-80GB", 1, 8)],
            cohorts=[{"name": "lab"}],
            queues=[
                queue("owner", {"h100-full": {"nominal": 8}}, cohort="lab"),
                queue("borrower", {"h100-full": {"nominal": 0, "borrowingLimit": 8}}, cohort="lab"),
            ],
            scheduling={"minRuntimeSeconds": 0, **sparing},
        )
        _, s = cycle(snapshot(p, [workload(p, "small", "borrower", gpus=2)]))
        _, s = cycle(submit(s, workload(p, "large", "borrower", gpus=6, submit=8)), 8)
        result, _ = cycle(submit(s, workload(p, "one", "owner", gpus=1, submit=9)), 9)
        assert result.admitted_ids() == ["owner/one"]
        return [e.workload for e in result.evictions]

    assert run(reclaimLargeVictimRatio=None) == ["borrower/large"]  # 6 GPU-seconds lost against 18
    assert run() == ["borrower/small"]  # the default spares gangs four times the reclaimer's size


def test_the_api_servers_scenario_in_the_engine() -> None:
    # tests/integration/test_reservations.py on the real API server, cycle by cycle here
    p = policy(
        pools=[pool("train", "H100-SXM5-80GB", 2, 8)],
        cohorts=[{"name": "lab"}],
        queues=[
            queue("research", {"h100-full": {"nominal": 12}}, cohort="lab"),
            queue("other", {"h100-full": {"nominal": 4, "borrowingLimit": 8}}, cohort="lab"),
        ],
        scheduling={"minRuntimeSeconds": 0, "reserveAfterSeconds": 0},
    )
    _, s = cycle(snapshot(p, [expecting(workload(p, "run", "other", gpus=4), 3600)]))
    result, s = cycle(submit(s, workload(p, "gang", "research", gpus=6, pods=2, submit=5)), 10)
    gang = result.pending_reason("research/gang")
    assert gang is not None and "expected in 59 min, once 1 running workload(s) end" in gang.message
    assert "other/run, by its deadline" in gang.message
    quick = expecting(workload(p, "quick", "other", gpus=2, submit=20), 60)
    late = expecting(workload(p, "late", "other", gpus=4, submit=21), 7200)
    result, s = cycle(submit(s, quick, late), 30)
    assert result.admitted_ids() == ["other/quick"]
    assert "by reservation" in result.pending_reason("other/late").message  # type: ignore[union-attr]
    s = finish(s, "other/run")
    result, _ = cycle(s, 100)
    assert result.admitted_ids() == ["research/gang"]


def test_only_work_needing_a_whole_node_reserves() -> None:
    p = one_node(**RESERVE)
    s = snapshot(p, [expecting(workload(p, "a", "o", gpus=4), 1000)])
    _, s = cycle(s)
    # 6 GPUs: less than a node; it runs as soon as 6 free, and reserving would only idle
    result, _ = cycle(submit(s, workload(p, "six", "r", gpus=6, submit=10)), 200)
    assert result.reservations == ()
    result, _ = cycle(submit(s, workload(p, "eight", "r", gpus=8, submit=10)), 200)
    assert [r.workload for r in result.reservations] == ["r/eight"]


def test_a_short_claim_does_not_jump_a_reservation() -> None:
    # a claimed runtime binds nothing (nothing stops the work at it): without a deadline or
    # history, the work counts as running the policy's default, and waits
    p = one_node(**RESERVE)
    s = half_busy(p, ends_in=1000)
    liar = claiming(workload(p, "liar", "o", gpus=2, submit=20), 60)
    result, _ = cycle(submit(s, liar), now=200)
    assert result.admitted_ids() == []
    honest = expecting(workload(p, "honest", "o", gpus=2, submit=21), 60)
    result, _ = cycle(submit(s, liar, honest), now=200)
    assert result.admitted_ids() == ["o/honest"]
