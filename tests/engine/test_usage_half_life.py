"""Fair share over time (scheduling.usageHalfLifeSeconds): a queue that borrowed the cohort all
night yields in the morning to one that did not; without a half-life the order is the
present's alone (then priority and submission)."""

from __future__ import annotations

from typing import Any

import pytest

from gpucarve.core.policy import Policy
from gpucarve.core.problems import InvalidInput
from gpucarve.core.snapshot import Snapshot
from gpucarve.core.usage import UsageBook
from gpucarve.engine import usage_moved_on
from gpucarve.engine.apply import finish
from gpucarve.engine.explain import explain
from gpucarve.engine.quota import SCALE
from tests.engine.builders import cycle, policy, pool, queue, snapshot, submit, workload

HOUR = 3600


def _policy(half_life: int | None) -> Policy:
    scheduling: dict[str, Any] = {"minRuntimeSeconds": 0}
    if half_life is not None:
        scheduling["usageHalfLifeSeconds"] = half_life
    return policy(
        pools=[pool("train", "H100-SXM5-80GB", 2, 8)],
        cohorts=[{"name": "all"}],
        queues=[
            queue("night", {"h100-full": {"nominal": 8}}, cohort="all"),
            queue("day", {"h100-full": {"nominal": 8}}, cohort="all"),
        ],
        scheduling=scheduling,
    )


def _morning(half_life: int | None) -> tuple[list[str], Snapshot]:
    """`night` borrows both nodes from 22:00 to 06:00; at 09:00 each queue asks for both."""
    p = _policy(half_life)
    s = snapshot(p, [workload(p, "all-night", "night", gpus=8, pods=2, submit=0)])
    result, s = cycle(s, now=0)
    assert result.admitted_ids() == ["night/all-night"]
    s = finish(s, "night/all-night")
    # the driver's step when work ends (the simulator's, the scheduler's next cycle)
    s = Snapshot(s.policy, s.cluster, s.running, s.pending, usage=usage_moved_on(s, 8 * HOUR))
    # `night` submitted first: with the present's share alone, it goes first
    s = submit(
        s,
        workload(p, "morning", "night", gpus=8, pods=2, submit=10 * HOUR),
        workload(p, "morning", "day", gpus=8, pods=2, submit=10 * HOUR + 1),
    )
    result, s = cycle(s, now=11 * HOUR)
    return result.admitted_ids(), s


def test_the_queue_that_borrowed_all_night_yields_in_the_morning() -> None:
    admitted, s = _morning(half_life=4 * HOUR)
    assert admitted == ["day/morning"]
    book = s.usage
    # night borrowed half the cohort for 8 hours, then nothing for 3: decayed, not gone
    half = SCALE * SCALE // 2
    assert 0 < book.decayed["night"] < half
    assert book.decayed.get("day", 0) == 0
    assert book.held == {"day": half} and book.as_of == 11 * HOUR


def test_without_a_half_life_the_present_alone_decides() -> None:
    admitted, s = _morning(half_life=None)
    assert admitted == ["night/morning"]
    assert s.usage == UsageBook()


def test_a_long_enough_morning_forgets_the_night() -> None:
    # a half-life of a minute: by 11:00 the night weighs nothing, and submission decides
    admitted, _ = _morning(half_life=60)
    assert admitted == ["night/morning"]


def test_explain_names_what_was_borrowed_recently() -> None:
    p = _policy(4 * HOUR)
    s = snapshot(p, [workload(p, "all-night", "night", gpus=8, pods=2, submit=0)])
    _, s = cycle(s, now=0)
    s = submit(s, workload(p, "next", "night", gpus=8, submit=HOUR))
    result, _ = cycle(s, now=2 * HOUR)
    e = explain(s, result, "night/next")
    assert e is not None
    assert "borrowed recently (half-life 14400s, scheduling.usageHalfLifeSeconds)" in e.fair_share
    # half the cohort for two hours of a four-hour half-life: 0.5 × (1 - 2^-0.5)
    assert "0.500 plus 0.146 borrowed recently" in e.fair_share


def test_the_book_decays_by_its_half_life() -> None:
    book = UsageBook(0, {"a": 1000}, {"b": 1000})
    at = book.at(3600, 3600)
    assert at == {"a": 500, "b": 500}
    assert book.at(0, 3600) == {"a": 1000}
    moved = book.moved_on(7200, 3600, {"a": 10})
    assert moved.decayed == {"a": 250, "b": 750} and moved.held == {"a": 10}


def test_the_book_reads_back_from_queue_statuses() -> None:
    book = UsageBook(100, {"a": 7}, {"a": 3, "b": 4})
    statuses = {q: book.to_status(q) for q in ("a", "b", "c")}
    again = UsageBook.from_statuses(statuses)
    assert again == book
    # malformed figures start the queue from nothing instead of failing the restart
    statuses["a"] = {"asOf": "yesterday", "decayedShare": 7, "heldShare": 3}
    assert UsageBook.from_statuses(statuses).decayed.get("a") is None


@pytest.mark.parametrize("bad", [0, 59, 91 * 86400])
def test_a_half_life_out_of_range_is_refused_naming_the_field(bad: int) -> None:
    with pytest.raises(InvalidInput) as err:
        _policy(bad)
    (problem,) = err.value.problems
    assert problem.path == ("scheduling", "usageHalfLifeSeconds") and problem.fix
