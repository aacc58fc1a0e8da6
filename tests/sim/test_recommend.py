"""`simulate --recommend`'s changes from the idle accounting: a MIG layout matched to the
demand the accounting shows was mismatched, with quotas that follow it; limits lifted where a
pool idled for them. The search itself: tests/sim/test_recommend_search.py."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from gpucarve.cli.main import app
from gpucarve.config.catalog_file import packaged_catalog
from gpucarve.sim.recommend.proposals import _split, layouts_for


def test_a_layout_follows_the_mix_and_fills_every_gpu() -> None:
    geom = packaged_catalog().lookup("A100-80GB").mig
    assert geom is not None
    # twice as many 1g.10gb instances in use as 3g.40gb ones, on two GPUs
    layouts = layouts_for({"3g.40gb": 1.0, "1g.10gb": 2.0}, geom, 2)
    assert len(layouts) == 2
    total = {p: sum(lay.get(p, 0) for lay in layouts) for p in ("3g.40gb", "1g.10gb")}
    assert total["1g.10gb"] > total["3g.40gb"] >= 1
    assert "2g.20gb" not in {p for lay in layouts for p in lay}  # nobody asked for it
    compute = {p.name: p.compute_slices for p in geom.profiles}
    for lay in layouts:
        used = sum(compute[p] * n for p, n in lay.items())
        assert used <= geom.compute_slices and geom.compute_slices - used < 3  # little left


def test_capacity_is_split_by_what_each_queue_asked() -> None:
    assert _split(10, {"a": 3.0, "b": 1.0}) == {"a": 8, "b": 2}
    assert _split(3, {"a": 1.0, "b": 1.0, "c": 1.0}) == {"a": 1, "b": 1, "c": 1}
    assert _split(5, {}) == {}


def test_a_profile_asked_for_is_not_lost_to_a_greedy_plan() -> None:
    geom = packaged_catalog().lookup("A100-80GB").mig
    assert geom is not None
    # planned alone, 2 × 3g.40gb per GPU takes all of both GPUs' memory: no 1g.10gb at all
    layouts = layouts_for({"3g.40gb": 2.0, "1g.10gb": 1.0}, geom, 2)
    held = {p: sum(lay.get(p, 0) for lay in layouts) for p in ("3g.40gb", "1g.10gb")}
    assert held["1g.10gb"] >= 1 and held["3g.40gb"] >= 2


def test_recommend_needs_gpucarve_and_keeps_json_clean(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["simulate", "--compare", "kube-default", "--recommend", "--days", "0.2"]
    )
    assert result.exit_code == 2
    assert "--recommend [needs-gpucarve]" in result.output and "fix: add --compare gpucarve" in (
        result.output
    )
    args = ["simulate", "--compare", "gpucarve", "--days", "0.5", "--load", "2", "--recommend"]
    result = CliRunner().invoke(app, [*args, "--json", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)  # the tables went to stderr
    assert doc["recommendation"]["path"][0]["policy"] == "the policy as read"


def test_the_unit_proposal_keeps_each_queues_gpus_and_turns_on_drain() -> None:
    from gpucarve.config.examples import POLICY, example_path
    from gpucarve.config.policy_build import build_policy, load_policy
    from gpucarve.sim.recommend.proposals import mig_layout

    loaded = load_policy(example_path(POLICY))
    doc = loaded.document.data if loaded.document is not None else None
    assert doc is not None
    idle = {"production": {"mig-layout": 100.0}}
    # one 3g.40gb workload's worth of demand is enough to call for the proposals
    from tests.engine.builders import workload

    w = workload(loaded.policy, "s", "production", mig="3g.40gb", duration=3600)
    props = {p.name: p for p in mig_layout(doc, loaded.policy, [w], idle)}
    unit = props["production: one GPU quota per queue, dynamic MIG with drain"]
    quotas = {q["name"]: q["quota"] for q in unit.doc["queues"]}
    # research 8 × 2g.20gb = 2 GPUs; production 12 × 3g.40gb + 16 × 1g.10gb = 8 GPUs, its
    # borrowing limit on 3g.40gb alone (none on 1g.10gb): unset; data science 16 1g + 8 2g +
    # 4 3g = 6 GPUs
    assert quotas["research"]["a100"] == {"nominal": 2}
    assert quotas["production"]["a100"] == {"nominal": 8}
    assert quotas["data-science"]["a100"] == {"nominal": 6}
    assert not any(k.startswith("a100-mig-") for q in quotas.values() for k in q)
    (pool,) = [p for p in unit.doc["pools"] if p["name"] == "production"]
    assert pool["mig"]["dynamic"]["drain"] is True
    built = build_policy(unit.doc, packaged_catalog()).policy  # it validates
    assert built.units["a100"].gpus == 16


def test_limits_are_lifted_only_where_the_pool_idled_for_them_and_it_changes_something() -> None:
    from gpucarve.config.examples import POLICY, example_path
    from gpucarve.config.policy_build import load_policy
    from gpucarve.sim.recommend.proposals import limits

    loaded = load_policy(example_path(POLICY))
    doc = loaded.document.data if loaded.document is not None else None
    assert doc is not None
    assert limits(doc, loaded.policy, {"training": {"borrowing-limit": 0.5}}) == []
    (prop,) = limits(doc, loaded.policy, {"training": {"borrowing-limit": 30.0}})
    assert prop.name == "training: borrowing limits lifted"
    quotas = {q["name"]: q["quota"] for q in prop.doc["queues"]}
    assert quotas["research"]["h100-full"] == {"nominal": 16}
    assert quotas["data-science"]["h100-full"] == {"nominal": 6}
    assert quotas["production"]["a100-mig-3g.40gb"]["borrowingLimit"] == 4  # another pool
    # production lends all of its nominal h100-full already: lifting that changes nothing
    assert limits(doc, loaded.policy, {"training": {"cohort-lending": 90.0}}) == []


def test_a_queue_past_its_bound_is_offered_a_quarter_of_each_other_queues_quota() -> None:
    from gpucarve.config.examples import POLICY, example_path
    from gpucarve.config.policy_build import build_policy, load_policy
    from gpucarve.sim.recommend.proposals import quota_moves

    loaded = load_policy(example_path(POLICY))
    doc = loaded.document.data if loaded.document is not None else None
    assert doc is not None
    assert quota_moves(doc, loaded.policy, []) == []
    moves = {p.name: p for p in quota_moves(doc, loaded.policy, ["data-science"])}
    # every key data science holds, from the queue of its cohort that holds the most there
    # (research's 16 h100-full before production's 10; production's 16 1g.10gb)
    assert sorted(moves) == [
        "quota: 2 a100-mig-2g.20gb from research to data-science",
        "quota: 3 a100-mig-3g.40gb from production to data-science",
        "quota: 4 a100-mig-1g.10gb from production to data-science",
        "quota: 4 h100-full from research to data-science",
        "quota: 4 l40s-shared from research to data-science",
    ]
    # production past its bound: h100-full from research (16), 3g.40gb from data science (4)
    for_production = {p.name for p in quota_moves(doc, loaded.policy, ["production"])}
    assert "quota: 4 h100-full from research to production" in for_production
    assert "quota: 1 a100-mig-3g.40gb from data-science to production" in for_production
    moved = moves["quota: 4 h100-full from research to data-science"]
    quotas = {q["name"]: q["quota"] for q in moved.doc["queues"]}
    assert quotas["research"]["h100-full"] == {"nominal": 12, "borrowingLimit": 16}
    assert quotas["data-science"]["h100-full"] == {"nominal": 10, "borrowingLimit": 10}
    assert "nominal 16 → 12" in moved.why and "6 → 10" in moved.why
    # a giver's lending limit above what it keeps comes down with it
    (lender,) = [p for p in quota_moves(doc, loaded.policy, ["research"]) if "h100-full" in p.name]
    assert lender.name == "quota: 2 h100-full from production to research"
    lent = {q["name"]: q["quota"] for q in lender.doc["queues"]}["production"]["h100-full"]
    assert lent == {"nominal": 8, "lendingLimit": 8}
    # the document as read is untouched, and each moved policy validates
    assert {q["name"]: q["quota"] for q in doc["queues"]}["production"]["h100-full"][
        "nominal"
    ] == 10
    for p in moves.values():
        build_policy(p.doc, packaged_catalog())
