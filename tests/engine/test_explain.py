"""The explanation of a workload: its queue's quota and usage after the cycle, its fair-share
turn, the decision, and hints that name what would let it run."""

from __future__ import annotations

from gpucarve.engine import run_cycle
from gpucarve.engine.decisions import Plugin
from gpucarve.engine.explain import explain, render
from tests.engine.builders import cycle, policy, pool, queue, snapshot, submit, workload

P = policy(
    pools=[pool("train", "H100-SXM5-80GB", 2, 8)],
    queues=[
        queue("a", {"h100-full": {"nominal": 8, "borrowingLimit": 8}}, cohort="c"),
        queue("b", {"h100-full": {"nominal": 8}}, cohort="c"),
    ],
    cohorts=[{"name": "c"}],
    scheduling={"minRuntimeSeconds": 300},
)


def test_a_queue_within_nominal_is_told_whom_it_can_reclaim_from_and_when() -> None:
    _, s = cycle(snapshot(P, [workload(P, "big", "a", gpus=8, pods=2)]), 100)
    mine = workload(P, "mine", "b", gpus=8, pods=1, submit=150)
    s = submit(s, mine)
    result = run_cycle(s, 200)  # a's gang is younger than the minimum runtime
    e = explain(s, result, "b/mine")
    assert e is not None and e.state == "pending" and e.reason is not None
    assert str(e.reason).startswith("quota/"), render(e)
    (line,) = [q for q in e.quota if q.flavor == "h100-full"]
    assert (line.nominal, line.used, line.needs) == (8, 0, 8)
    # started at t=100 with a 300 s minimum runtime: reclaimable 200 s after t=200
    assert any("reclaim 16 h100-full from queue a (a/big, borrowing): possible in 200 s, once it "
               "has run its minimum runtime of 300 s" in h for h in e.hints), e.hints  # fmt: skip
    assert not any("t=" in h for h in e.hints), e.hints  # no internal epochs


def test_a_gang_reclaim_spares_is_named_with_the_time_left_in_the_reason_and_explain() -> None:
    spare = policy(
        pools=[pool("train", "H100-SXM5-80GB", 2, 8)],
        queues=[
            queue("a", {"h100-full": {"nominal": 8, "borrowingLimit": 8}}, cohort="c"),
            queue("b", {"h100-full": {"nominal": 8}}, cohort="c"),
        ],
        cohorts=[{"name": "c"}],
        scheduling={"minRuntimeSeconds": 0, "reclaimLargeVictimRatio": 4,
                    "reclaimLargeVictimAfterSeconds": 3600},
    )  # fmt: skip
    _, s = cycle(snapshot(spare, [workload(spare, "big", "a", gpus=8, pods=2)]), 0)
    small = workload(spare, "small", "b", gpus=1, submit=100)
    s = submit(s, small)
    result = run_cycle(s, 200)
    (pend,) = [p for p in result.pending if p.workload == "b/small"]
    assert pend.reason.plugin is Plugin.RECLAIM_SPARING, pend.reason
    assert "reclaim spares a/big: it holds 16 slices, more than 4 times" in pend.reason.message
    assert "in 3500 s" in pend.reason.message
    e = explain(s, result, "b/small")
    assert e is not None
    assert any("reclaim spares a/big" in h and "3500 s" in h for h in e.hints), e.hints
    assert not any("possible now" in h for h in e.hints), e.hints
    # past the bound it is reclaimed
    later = run_cycle(s, 100 + 3600)
    assert "b/small" in later.admitted_ids()


def test_a_queue_over_its_borrowing_limit_is_told_so() -> None:
    _, s = cycle(snapshot(P, [workload(P, "one", "a", gpus=8, pods=1)]), 0)
    s = submit(s, workload(P, "two", "a", gpus=8, pods=2, submit=1))
    e = explain(s, run_cycle(s, 10), "a/two")
    assert e is not None and e.reason is not None and str(e.reason).startswith("quota/")
    text = "\n".join(render(e))
    assert "its borrowing limit lets it hold 16: 8 of its own h100-full must be given back" in text
    assert text.splitlines()[0] == "workload a/two: 2 pods (all at once), released if short of " \
        "pods for 900 s; pending"  # fmt: skip


def test_an_admitted_workload_says_where() -> None:
    s = snapshot(P, [workload(P, "one", "a", gpus=8, pods=1)])
    e = explain(s, run_cycle(s, 0), "a/one")
    assert e is not None and e.state == "admitted"
    assert e.hints == ("admitted this cycle: 1 pods on train-0",)
    assert explain(s, run_cycle(s, 0), "a/nothing") is None


def test_explain_says_what_is_free_while_it_waits_and_why() -> None:
    p = policy(
        pools=[pool("train", "H100-SXM5-80GB", 2, 8)],
        queues=[
            queue("a", {"h100-full": {"nominal": 8}}),
            queue("b", {"h100-full": {"nominal": 8}}),
        ],
    )
    _, s = cycle(snapshot(p, [workload(p, "run", "b", gpus=4)]))
    s = submit(
        s, workload(p, "more", "b", gpus=8, submit=5), workload(p, "next", "b", gpus=8, submit=6)
    )
    result = run_cycle(s, 10)
    lines = render(explain(s, result, "b/more"))  # type: ignore[arg-type]
    i = lines.index("free while it waits:")
    assert lines[i + 1] == (
        "  - 12 h100-full free: nominal-quota "
        "(this workload's reason: it is the first waiting that could use them)"
    )
    later = render(explain(s, result, "b/next"))  # type: ignore[arg-type]
    assert (
        "  - 12 h100-full free: nominal-quota (the reason of b/more, the first waiting that "
        "could use them)" in later
    )


def test_explain_says_how_long_the_workload_is_expected_to_run_and_whence() -> None:
    import dataclasses

    w = dataclasses.replace(workload(P, "bounded", "b", gpus=8, pods=3), runtime_limit_s=600)
    s = snapshot(P, [w])
    e = explain(s, run_cycle(s, 0), "b/bounded")
    assert e is not None
    assert "expected to run 600 s, by its deadline" in render(e)
    plain = snapshot(P, [workload(P, "open", "b", gpus=8, pods=3)])
    e = explain(plain, run_cycle(plain, 0), "b/open")
    assert e is not None and "expected to run 86400 s, by the default runtime" in render(e)


def _cohort_of(research: int, other: int, nodes: int) -> object:
    return policy(
        pools=[pool("train", "H100-SXM5-80GB", nodes, 8)],
        queues=[
            queue("research", {"h100-full": {"nominal": research}}, cohort="c"),
            queue("prod", {"h100-full": {"nominal": other}}, cohort="c"),
        ],
        cohorts=[{"name": "c"}],
    )


def _hints_after(
    p: object, running: list[tuple[str, str, int]], asking: tuple[str, int]
) -> list[str]:
    """Hints for `asking` (queue, GPUs in one pod) once `running` (name, queue, GPUs) run."""
    from gpucarve.core.policy import Policy

    assert isinstance(p, Policy)
    s = snapshot(p, [])
    for i, (name, q, gpus) in enumerate(running):
        s = submit(s, workload(p, name, q, gpus=gpus, submit=i))
        _, s = cycle(s, i)
    assert len(s.running) == len(running), "the set-up runs whole"
    s = submit(s, workload(p, "ask", asking[0], gpus=asking[1], submit=100))
    result = run_cycle(s, 100)
    e = explain(s, result, f"{asking[0]}/ask")
    assert e is not None and e.state == "pending", e
    return list(e.hints)


def test_the_cohort_shortfall_is_what_admission_compares_while_a_queue_borrows() -> None:
    # research at 25/16 needs 8 more, the cohort lends 7: short by 1 (not the 17 borrowed - 7)
    p = _cohort_of(16, 24, 5)
    running = [("r1", "research", 8), ("r2", "research", 8), ("r3", "research", 8),
               ("r4", "research", 1), ("p1", "prod", 8)]  # fmt: skip
    hints = _hints_after(p, running, ("research", 8))
    assert any("draws 8 more h100-full from cohort c, which lends 7 now: 1 more must be" in h
               for h in hints), hints  # fmt: skip
    # at 9/2 needing 1, nothing to lend: short by 1 (not 8)
    p = _cohort_of(2, 14, 2)
    running = [("r1", "research", 8), ("r2", "research", 1), ("p1", "prod", 7)]
    hints = _hints_after(p, running, ("research", 1))
    assert any("draws 1 more h100-full from cohort c, which lends 0 now: 1 more must be" in h
               for h in hints), hints  # fmt: skip


def test_a_queue_within_reach_of_its_nominal_still_gets_its_cohort_line() -> None:
    # at 0/6 needing 8 with 7 to lend: the cohort line says 1 (it said nothing)
    p = _cohort_of(6, 10, 2)
    hints = _hints_after(p, [("p1", "prod", 8), ("p2", "prod", 1)], ("research", 8))
    assert any("which lends 7 now: 1 more must be given back" in h for h in hints), hints


def test_a_pod_larger_than_any_node_has_free_is_told_what_one_node_lacks() -> None:
    # 8 free in all, 4 on each node: a 7-GPU pod needs 3 more on one node (it said 0)
    p = policy(
        pools=[pool("train", "H100-SXM5-80GB", 2, 8)],
        queues=[queue("research", {"h100-full": {"nominal": 16}})],
        scheduling={"scoring": {"binpack": 0, "spread": 1, "fragmentation": 0}},
    )
    hints = _hints_after(p, [("a", "research", 4), ("b", "research", 4)], ("research", 7))
    assert any("at most 4 on one node; its largest pod needs 7 on one node: it runs once 3 more"
               in h for h in hints), hints  # fmt: skip
