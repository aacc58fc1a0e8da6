"""How long a PodDisruptionBudget may hold off reclaim of borrowed work
(`scheduling.reclaimPastBudgetAfterSeconds`, `kube/scheduler/evictions.PastBudget`): the count
starts at a victim's first refusal, ends in deletion once the bound has passed, never with no
bound, and starts afresh for a victim the engine stopped asking for. The API server's side is
tests/integration/test_reclaim_grace.py."""

from __future__ import annotations

import copy

import pytest

from gpucarve.config.policy_build import build_policy
from gpucarve.core.catalog import Catalog
from gpucarve.core.problems import InvalidInput
from gpucarve.kube.scheduler.evictions import FORGET_S, REFUSED_RETRY_S, PastBudget, refusal
from tests.unit.config.test_policy_rules import BASE


def test_a_victim_is_due_once_its_budget_has_refused_for_the_bound() -> None:
    past = PastBudget(300)
    assert not past.due("ns/a", 1000)  # the first refusal starts the count
    for now in range(1000 + REFUSED_RETRY_S, 1300, REFUSED_RETRY_S):
        assert not past.due("ns/a", now)
    assert past.held_s("ns/a", 1290) == 290
    assert past.due("ns/a", 1300)
    assert not past.due("ns/b", 1300)  # another victim counts from its own first refusal


def test_zero_deletes_at_the_first_refusal_and_none_never() -> None:
    assert PastBudget(0).due("ns/a", 5)
    never = PastBudget(None)
    assert not any(never.due("ns/a", t) for t in range(0, 86_400 * 30, 3600))
    assert never.reclaimed({"ns/a": 429}) is None


def test_a_victim_no_longer_asked_for_is_forgotten_and_counts_afresh() -> None:
    past = PastBudget(300)
    past.due("ns/a", 0)
    past.due("ns/a", 200)
    past.forget(200 + FORGET_S)  # a cycle or two that did not reach its reclaimer: kept
    assert past.due("ns/a", 300)
    past.forget(300 + FORGET_S + 1)
    assert not past.due("ns/a", 400)  # refused again later: a new count from 400
    assert past.due("ns/a", 700)


def test_the_reason_says_when_reclaim_deletes_only_for_reclaim_victims() -> None:
    past = PastBudget(300)
    past.due("ns/a", 10)
    assert past.reclaimed({"ns/a": 429}) == 300
    assert past.reclaimed({"ns/b": 429}) is None  # a preemption's or a move's victim
    assert refusal({"ns/a": 429}, past.reclaimed({"ns/a": 429})) == (
        "preemption/refused: the eviction of ns/a was refused (a PodDisruptionBudget); asked "
        "again in 10 s; reclaim deletes it once its budget has refused for 300 s "
        "(scheduling.reclaimPastBudgetAfterSeconds)"
    )
    assert "; reclaim deletes them once their budget has refused for 300 s" in refusal(
        {"ns/a": 429, "ns/b": 429}, 300
    )
    assert "reclaim deletes" not in refusal({"ns/b": 429}, past.reclaimed({"ns/b": 429}))


def test_the_policy_field_defaults_to_five_minutes_and_refuses_a_negative(
    catalog: Catalog,
) -> None:
    assert build_policy(copy.deepcopy(BASE), catalog).policy.scheduling.reclaim_past_budget_s == 300
    for value, want in ((0, 0), (None, None)):
        d = copy.deepcopy(BASE)
        d["scheduling"] = {"reclaimPastBudgetAfterSeconds": value}
        assert build_policy(d, catalog).policy.scheduling.reclaim_past_budget_s == want
    d = copy.deepcopy(BASE)
    d["scheduling"] = {"reclaimPastBudgetAfterSeconds": -1}
    with pytest.raises(InvalidInput) as exc:
        build_policy(d, catalog)
    (problem,) = exc.value.problems
    assert problem.location == "scheduling.reclaimPastBudgetAfterSeconds"
    assert (problem.code, problem.message, problem.fix) == (
        "out-of-range",
        "must be ≥ 0, got -1",
        "use a value ≥ 0",
    )
