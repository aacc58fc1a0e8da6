"""Nested cohorts: a department (cohort `ml`, over research and data science) inside the
company cohort beside production. What a department's team leaves unused goes to its own
teams before another department, in the order of admission and by reclaim; a department's
own limits bound what its teams draw; a flat policy keeps its one-level arithmetic."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucarve.config.catalog_file import packaged_catalog
from gpucarve.config.policy_build import load_policy
from gpucarve.config.workload_spec import build_workloads
from gpucarve.config.yaml_source import read_yaml
from gpucarve.core.policy import Policy
from gpucarve.core.problems import InvalidInput, Severity
from gpucarve.core.snapshot import Snapshot
from gpucarve.core.workload import RunningWorkload
from gpucarve.engine import run_cycle
from gpucarve.engine.apply import apply
from gpucarve.engine.decisions import Cause
from gpucarve.engine.explain import explain, render
from gpucarve.engine.invariants import step_violations
from gpucarve.engine.quota import Quotas
from tests.engine.builders import cycle, policy, pool, queue, snapshot, submit, workload
from tests.engine.test_properties import clusters

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _tree(
    ml: dict[str, Any] | None = None,
    flat: bool = False,
    min_runtime: int = 0,
    preemption: bool = True,
) -> Policy:
    """32 H100s: research 16 and data science 6 in department ml, production 10 beside it."""
    cohorts: list[dict[str, Any]] = [{"name": "company"}]
    if not flat:
        cohorts.append({"name": "ml", "parent": "company", **(ml or {})})
    dept = "company" if flat else "ml"
    return policy(
        pools=[pool("train", "H100-SXM5-80GB", 4, 8)],
        cohorts=cohorts,
        queues=[
            queue("research", {"h100-full": {"nominal": 16}}, cohort=dept),
            queue("data-science", {"h100-full": {"nominal": 6}}, cohort=dept),
            queue("production", {"h100-full": {"nominal": 10}}, cohort="company"),
        ],
        scheduling={"minRuntimeSeconds": min_runtime, "preemption": preemption},
    )


def _both_ask(p: Policy) -> tuple[list[str], Snapshot]:
    """Research idle; production asks first for 24 (14 past its own), data science a minute
    later for 16 (10 past its own): not both fit."""
    s = snapshot(
        p,
        [
            workload(p, "serve-batch", "production", gpus=8, pods=3, submit=0),
            workload(p, "churn", "data-science", gpus=8, pods=2, submit=60),
        ],
    )
    result, after = cycle(s, now=120)
    assert step_violations(s, result, after) == []
    return result.admitted_ids(), after


@pytest.mark.parametrize("preemption", [True, False])
def test_a_departments_unused_quota_goes_to_its_own_team_first(preemption: bool) -> None:
    # without preemption, the order of admission alone: department ml, within what it
    # holds, goes before production, which would borrow at the company level
    admitted, _ = _both_ask(_tree(preemption=preemption))
    assert admitted == ["data-science/churn"]


def test_flat_cohorts_serve_whoever_asked_first() -> None:
    admitted, _ = _both_ask(_tree(flat=True))
    assert admitted == ["production/serve-batch"]


def _production_runs_then_ds_asks(p: Policy) -> tuple[list[str], list[str], Snapshot]:
    s = snapshot(p, [workload(p, "serve-batch", "production", gpus=8, pods=3, submit=0)])
    result, s = cycle(s, now=0)
    assert result.admitted_ids() == ["production/serve-batch"]
    s = submit(s, workload(p, "churn", "data-science", gpus=8, pods=2, submit=100))
    before = s
    result, s = cycle(s, now=200)
    assert step_violations(before, result, s) == []
    evicted = [f"{e.workload}:{e.cause.value}" for e in result.evictions]
    return result.admitted_ids(), evicted, s


def test_a_team_past_its_own_quota_reclaims_from_another_department() -> None:
    # data science is past its own 6, but department ml stays within the 22 it holds:
    # production borrows research's quota at the company level, and gives it back
    admitted, evicted, _ = _production_runs_then_ds_asks(_tree())
    assert admitted == ["data-science/churn"]
    assert evicted == [f"production/serve-batch:{Cause.RECLAIM.value}"]


def test_a_department_may_keep_its_teams_from_reclaiming_past_their_own() -> None:
    # reclaimForMembers: false: department ml's room no longer lets data science, past its
    # own 6, evict production; data science waits, as under flat cohorts, and explain offers
    # no reclaim
    p = _tree(ml={"reclaimForMembers": False})
    admitted, evicted, s = _production_runs_then_ds_asks(p)
    assert admitted == [] and evicted == []
    e = explain(s, run_cycle(s, 300), "data-science/churn")
    assert e is not None
    assert not any("from queue production" in line for line in render(e))
    # within its own nominal a team still reclaims: production holds all 32, data science
    # asks for its own 6
    s = snapshot(p, [workload(p, f"n{i}", "production", gpus=8) for i in range(4)])
    _, s = cycle(s, 0)
    s = submit(s, workload(p, "small", "data-science", gpus=6, submit=100))
    result, _ = cycle(s, 200)
    assert result.admitted_ids() == ["data-science/small"]
    assert [e.cause for e in result.evictions] == [Cause.RECLAIM]


def test_flat_a_queue_past_its_nominal_never_reclaims() -> None:
    admitted, evicted, s = _production_runs_then_ds_asks(_tree(flat=True))
    assert admitted == [] and evicted == []
    e = explain(s, run_cycle(s, 300), "data-science/churn")
    assert e is not None
    assert not any("reclaim" in line for line in render(e))


def test_explain_names_the_reclaim_a_team_in_a_tree_may_make() -> None:
    # production runs its 24 in a flat and in a tree policy; data science waits while its
    # reclaim is put off (minimum runtime): the tree's explain offers it, the flat's not
    for flat in (True, False):
        p = _tree(flat=flat, min_runtime=3600)
        s = snapshot(p, [workload(p, "serve-batch", "production", gpus=8, pods=3, submit=0)])
        _, s = cycle(s, now=0)
        s = submit(s, workload(p, "churn", "data-science", gpus=8, pods=2, submit=100))
        result = run_cycle(s, 200)
        e = explain(s, result, "data-science/churn")
        assert e is not None
        if not flat:
            # the company level, not ml, is what has only 8 left
            (pend,) = result.pending
            assert "cohort ml has 8 to lend (bounded by cohort company above it)" in (
                pend.reason.message
            )
        if not flat:
            # the chain of levels: ml holds 22 and lends 8 more, as company has 8 left
            (chain,) = [line for line in render(e) if "levels: " in line]
            assert chain.endswith(
                "levels: cohort ml holds 22, its members draw 0, 8 more may be drawn; "
                "cohort company holds 32, its members draw 24, 8 more may be drawn"
            ), chain
        hints = [line for line in render(e) if "h100-full from queue production" in line]
        assert bool(hints) is not flat, render(e)


def test_a_department_that_lends_nothing_keeps_its_quota_for_its_teams() -> None:
    p = _tree(ml={"quota": {"h100-full": {"nominal": 0, "lendingLimit": 0}}})
    s = snapshot(p, [workload(p, "serve-batch", "production", gpus=8, pods=3, submit=0)])
    result, _ = cycle(s, now=0)
    assert result.admitted_ids() == []
    (pend,) = result.pending
    # production can never draw research's quota: it holds its own 10 at most
    assert "queue production can never hold more than 10" in pend.reason.message
    q = Quotas(p, {})
    assert q.reach("production", "h100-full") == 10  # type: ignore[arg-type]
    assert q.reach("data-science", "h100-full") == 32  # type: ignore[arg-type]


def test_a_departments_borrowing_limit_bounds_its_teams() -> None:
    # ml may borrow 2 past the 22 it holds: research's 16 and data science's 6 plus 2
    p = _tree(ml={"quota": {"h100-full": {"nominal": 0, "borrowingLimit": 2}}})
    q = Quotas(p, {})
    assert q.reach("data-science", "h100-full") == 24  # type: ignore[arg-type]
    s = snapshot(p, [workload(p, "wide", "data-science", gpus=8, pods=4, submit=0)])
    result, _ = cycle(s, now=0)
    assert result.admitted_ids() == []
    assert "can never hold more than 24" in result.pending[0].reason.message
    s = snapshot(p, [workload(p, "wide", "data-science", gpus=8, pods=3, submit=0)])
    result, _ = cycle(s, now=0)
    assert result.admitted_ids() == ["data-science/wide"]
    s = snapshot(
        p,
        [
            workload(p, "own", "research", gpus=8, pods=2, submit=0),
            workload(p, "wide", "data-science", gpus=8, pods=2, submit=10),
        ],
    )
    result, _ = cycle(s, now=20)
    assert result.admitted_ids() == ["research/own"]
    msg = result.pending[0].reason.message
    assert "cohort ml has 8 to lend (bounded by cohort ml" not in msg
    assert "cohort ml has 8 to lend" in msg


def test_the_departments_example_plans_as_its_comment_says() -> None:
    p = load_policy(EXAMPLES / "departments" / "policy.yaml").policy
    doc = read_yaml(EXAMPLES / "departments" / "workloads.yaml")
    ws = build_workloads(doc.data["workloads"], p, doc.source, ("workloads",))
    s = snapshot(p, ws)
    result = run_cycle(s, 0)
    assert result.admitted_ids() == ["data-science/churn-train"]
    assert step_violations(s, result, apply(s, result)) == []


def _load(doc_cohorts: list[dict[str, Any]], queues: list[dict[str, Any]]) -> list[Any]:
    try:
        policy(pools=[pool("train", "H100-SXM5-80GB", 4, 8)], cohorts=doc_cohorts, queues=queues)
    except InvalidInput as exc:
        return [
            (p.code, ".".join(map(str, p.path)), f"{p.message} | {p.fix}")
            for p in exc.problems
            if p.severity is Severity.ERROR
        ]
    return []


QS = [
    queue("a", {"h100-full": {"nominal": 16}}, cohort="x"),
    queue("b", {"h100-full": {"nominal": 16}}, cohort="y"),
]


def test_a_loop_of_parents_is_refused_with_its_path() -> None:
    found = _load([{"name": "x", "parent": "y"}, {"name": "y", "parent": "x"}], QS)
    assert [(c, p) for c, p, _ in found] == [("cohort-cycle", "cohorts.0.parent")]
    assert "x → y → x" in found[0][2]


def test_an_unknown_parent_is_refused_with_a_suggestion() -> None:
    found = _load([{"name": "x", "parent": "yy"}, {"name": "y"}], QS)
    assert [(c, p) for c, p, _ in found] == [("unknown-cohort", "cohorts.0.parent")]
    assert "did you mean 'y'" in found[0][2]


def test_limits_on_a_root_and_lending_past_what_it_holds_are_refused() -> None:
    root_limit = _load(
        [{"name": "x", "quota": {"h100-full": {"nominal": 0, "borrowingLimit": 4}}}, {"name": "y"}],
        QS,
    )
    assert [(c, p) for c, p, _ in root_limit] == [
        ("limit-without-parent", "cohorts.0.quota.h100-full.borrowingLimit")
    ]
    lends_more = _load(
        [
            {"name": "top"},
            {
                "name": "x",
                "parent": "top",
                "quota": {"h100-full": {"nominal": 0, "lendingLimit": 20}},
            },
            {"name": "y", "parent": "top"},
        ],
        QS,
    )
    assert [(c, p) for c, p, _ in lends_more] == [
        ("out-of-range", "cohorts.1.quota.h100-full.lendingLimit")
    ]
    assert "exceeds the 16 it holds" in lends_more[0][2]


def test_a_cohort_of_cohorts_is_not_lonely() -> None:
    doc = {
        "apiVersion": "gpucarve.io/v1alpha1",
        "kind": "Policy",
        "metadata": {"name": "t"},
        "pools": [pool("train", "H100-SXM5-80GB", 4, 8)],
        "cohorts": [
            {"name": "top"},
            {"name": "x", "parent": "top"},
            {"name": "y", "parent": "top"},
        ],
        "queues": [
            queue("a", {"h100-full": {"nominal": 16}}, cohort="x"),
            queue("b", {"h100-full": {"nominal": 16}}, cohort="y"),
        ],
    }
    from gpucarve.config.policy_build import build_policy

    loaded = build_policy(doc, packaged_catalog())
    lonely = [p for p in loaded.warnings if p.code == "lonely-cohort"]
    # x and y hold one queue each; top holds two cohorts
    assert sorted(".".join(map(str, p.path)) for p in lonely) == ["cohorts.1", "cohorts.2"]
    assert all(p.severity is Severity.WARNING for p in lonely)


@pytest.mark.parametrize("flat", [True, False])
def test_the_invariant_check_catches_a_tree_overdrawn(flat: bool) -> None:
    p = _tree(flat=flat)
    # production holds all 32 (22 borrowed); research then runs its 16 beside it: the tree
    # lends more than it holds, whatever its shape
    s = snapshot(p, [workload(p, "all", "production", gpus=8, pods=4, submit=0)])
    result, s = cycle(s, now=0)
    assert result.admitted_ids() == ["production/all"]
    from gpucarve.engine.invariants import _quota

    rw = s.running[0]
    extra = workload(p, "own", "research", gpus=8, pods=2, submit=0)
    over = Snapshot(
        p, s.cluster, (*s.running, RunningWorkload(extra, rw.pods[:2], 0)), (), usage=s.usage
    )
    found = _quota(p, over)
    assert any("lends" in f for f in found), found


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_reach_is_exactly_what_an_idle_tree_admits(data: st.DataObject) -> None:
    # the ceiling (`reach`, which admission, explain and the webhook refuse by) is never
    # below what quota would admit on an idle tree, and never above it
    p = data.draw(clusters(cohort=True, tree=True))
    q = Quotas(p, {})
    for name in (x.name for x in p.queues):
        for flavor in p.flavors:
            most = q.reach(name, flavor)
            if most == 0:
                assert not q.check(name, {flavor: 1}).fits
                continue
            assert q.check(name, {flavor: most}).fits, (name, flavor, most)
            assert not q.check(name, {flavor: most + 1}).fits, (name, flavor, most)
