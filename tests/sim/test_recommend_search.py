"""`simulate --recommend` as a search: ranked by the policy's stated objective, derived on one
trace and judged on others, the same choice whichever executor ran the replays."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpucarve.cli.main import app
from gpucarve.config.examples import POLICY, TRACE_JSONL, example_path
from gpucarve.core.policy import Minimize, Objective
from gpucarve.sim.recommend.search import (
    Candidate,
    Change,
    Figures,
    Verdict,
    _gains,
    bounds,
    verdict,
)

HOUR = 3600.0


def figures(lost: float, idle: float, **waits_h: float) -> Figures:
    waits = {q.replace("_", "-"): h * HOUR for q, h in waits_h.items()}
    return Figures(lost, idle, waits, waits, {}, {}, {})


def test_a_named_queue_is_held_to_its_bound_and_the_others_to_the_policy_as_read() -> None:
    objective = Objective(Minimize.WASTED, {"production": 3600}, 0.1)
    base = figures(10, 20, production=5.0, research=10.0)
    got = bounds(objective, base)
    assert got["production"] == 3600  # its stated bound, even though it waited longer as read
    assert got["research"] == 10.0 * HOUR * 1.1 + 60
    # within research's +10 %, production past its hour by 1 h: 1 h past, production named
    v = verdict(objective, [figures(1, 2, production=2.0, research=10.5)], [base])
    assert (v.objective, v.excess_h, v.past) == (3.0, 1.0, ("production",))
    # the objective figure follows `minimize`
    lost = Objective(Minimize.LOST, {}, 0.1)
    assert verdict(lost, [figures(1, 2, production=5, research=10)], [base]).objective == 1.0
    idle = Objective(Minimize.IDLE, {}, 0.1)
    assert verdict(idle, [figures(1, 2, production=5, research=10)], [base]).objective == 2.0


def test_a_policy_within_its_bounds_ranks_before_a_cheaper_one_past_them() -> None:
    within, past = Verdict(100.0, 0.0, ()), Verdict(10.0, 0.5, ("research",))
    assert within.key() < past.key()
    assert _gains(within, past)  # back within the bounds is a gain at any cost
    assert not _gains(past, within)
    # a gain smaller than 2 % of the objective (or half a GPU-hour) is noise
    assert not _gains(Verdict(99.0, 0.0, ()), within)
    assert _gains(Verdict(97.0, 0.0, ()), within)
    assert not _gains(Verdict(0.8, 0.0, ()), Verdict(1.2, 0.0, ()))


def test_a_later_change_of_the_same_option_replaces_the_earlier_one() -> None:
    first = Candidate((Change("reserveAfterSeconds", "reserveAfterSeconds: 900", "x"),), {})
    grace = Candidate((Change("reclaimGraceSeconds", "reclaimGraceSeconds: null", "y"),), {"g": 1})
    again = Candidate((Change("reserveAfterSeconds", "reserveAfterSeconds: 3600", "z"),), {"r": 2})
    made = first.then(grace).then(again)
    assert made.name == "reclaimGraceSeconds: null + reserveAfterSeconds: 3600"
    assert made.doc == {"r": 2}


def recommend(tmp_path: Path, *extra: str, days: float = 0.5) -> tuple[dict[str, Any], str]:
    """`simulate --recommend` of the example at load 2, judged on one seed: the
    recommendation and what went to standard error."""
    args = ["simulate", "--compare", "gpucarve", "--days", str(days), "--load", "2",
            "--recommend", "--judge-seeds", "1", "--json", "--out", str(tmp_path),
            *extra]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["recommendation"], result.stderr


def test_the_search_derives_on_one_seed_judges_on_another_and_saves_its_choice(
    tmp_path: Path,
) -> None:
    one, said = recommend(tmp_path / "one", "--jobs", "1")
    assert one["derived_on"] == ["seed 42"] and one["judged_on"] == ["seed 43"]
    assert one["objective"]["minimize"] == "wasted-gpu-hours"
    assert one["objective"]["wait_p95_s"] == {"data-science": 14400, "production": 3600}
    path = one["path"]
    assert path[0]["policy"] == "the policy as read"
    assert "recommend: round 1:" in said and "thin evidence" in one["evidence"]
    # every step ranks better on the derive trace than the one before it
    for before, after in itertools.pairwise(path):
        b, a = before["derived"], after["derived"]
        assert (a["hours_past_wait_bounds"], a["objective_gpu_hours"]) < (
            b["hours_past_wait_bounds"], b["objective_gpu_hours"])  # fmt: skip
        # the step taken was the best of its round
        best = before["round_ranking"][0]
        assert after["policy"].endswith(best["change"])
    # a round's candidates are ranked: within the bounds first, then by the objective
    for step in path:
        keys = [(r["hours_past_wait_bounds"] > 0, r["hours_past_wait_bounds"],
                 r["objective_gpu_hours"]) for r in step["round_ranking"]]  # fmt: skip
        assert keys == sorted(keys)
    judged = one["judged"]
    assert {j["policy"] for j in judged} == {s["policy"] for s in path}  # every step judged
    assert judged[0]["policy"] == one["chosen"]
    keys = [(j["hours_past_wait_bounds"] > 0, j["hours_past_wait_bounds"],
             j["objective_gpu_hours"]) for j in judged]  # fmt: skip
    assert keys == sorted(keys)
    # each stated bound against what its queue could have had alone on the judge trace: no
    # policy the search judged waits less there
    alone = one["wait_alone_p95_h"]
    assert set(alone) == {"data-science", "production"} and "Stated wait bounds" in said
    for q, (value,) in alone.items():
        assert value is not None and value >= 0
        assert all(j["wait_p95_h"][q] >= value for j in judged), (q, value)
    saved = tmp_path / "one" / "recommended.yaml"
    if one["changes"]:
        policy = yaml.safe_load(saved.read_text())
        assert policy["metadata"]["name"] == "three-teams"
        check = CliRunner().invoke(app, ["validate", str(saved)])
        assert check.exit_code == 0, check.output
        diff = (tmp_path / "one" / "recommended.diff").read_text()
        assert diff.startswith("--- policy (as read)")
    else:
        assert not saved.exists() and "keep the policy as read" in one["evidence"]
    # the same choice and figures with the replays on two worker processes
    two, _ = recommend(tmp_path / "two", "--jobs", "2")
    assert two == one


def test_a_history_is_derived_on_its_first_two_thirds_and_judged_on_the_last(
    tmp_path: Path,
) -> None:
    args = ["simulate", "--trace", str(example_path(TRACE_JSONL)), "--compare", "gpucarve",
            "--recommend", "--jobs", "1", "--json", "--out", str(tmp_path)]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    rec = json.loads(result.stdout)["recommendation"]
    (derived,), (judged,) = rec["derived_on"], rec["judged_on"]
    assert derived.startswith("three-teams-small.jsonl days 0-")
    cut = derived.rsplit("-", 1)[1]
    assert judged.startswith(f"three-teams-small.jsonl days {cut}-")
    assert "thin evidence" in rec["evidence"]


def test_an_objective_naming_a_queue_the_policy_lacks_is_refused(tmp_path: Path) -> None:
    doc = yaml.safe_load(example_path(POLICY).read_text())
    doc["objective"]["waitP95Seconds"]["reserach"] = 3600
    bad = tmp_path / "policy.yaml"
    bad.write_text(yaml.safe_dump(doc))
    result = CliRunner().invoke(app, ["validate", str(bad)])
    assert result.exit_code != 0
    assert "objective.waitP95Seconds.reserach" in result.output
    assert "[unknown-queue]" in result.output and "research" in result.output


@pytest.mark.parametrize("minimize", ["most-gpu-hours"])
def test_an_objective_the_search_cannot_rank_by_is_refused(tmp_path: Path, minimize: str) -> None:
    doc = yaml.safe_load(example_path(POLICY).read_text())
    doc["objective"]["minimize"] = minimize
    bad = tmp_path / "policy.yaml"
    bad.write_text(yaml.safe_dump(doc))
    result = CliRunner().invoke(app, ["validate", str(bad)])
    assert result.exit_code != 0 and "objective.minimize" in result.output
    assert "wasted-gpu-hours" in result.output


def test_derive_and_judge_seeds_follow_each_other_and_never_overlap() -> None:
    from gpucarve.cli.simulate_cmd import _cases, _scenario, _synthetic_workloads
    from gpucarve.config.policy_build import load_policy

    policy = load_policy(example_path(POLICY)).policy
    scenario = _scenario(policy, 0.2, 1.0, "test")
    trace = _synthetic_workloads(policy, scenario, 0.2, 42)
    derive, judged = _cases(policy, trace, (0, 17280), None, 42, 0.2, 1.0, (2, 3))
    assert [c.key for c in derive] == ["seed 42", "seed 43"]
    assert [c.key for c in judged] == ["seed 44", "seed 45", "seed 46"]
    assert derive[0].workloads == tuple(trace[0])  # the run the report shows is derived on
    assert derive[1].workloads != derive[0].workloads
