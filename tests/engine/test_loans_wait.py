"""Loans that wait for lenders (scheduling.loansWaitForLenders): a queue's unused nominal
quota is not lent while its own work that fits within that quota waits; the borrower waits
instead, and its reason names the lender. Work of the lender that could only run on loan keeps
nothing back, nor does a lender with nothing waiting."""

from __future__ import annotations

from typing import Any

from gpucarve.core.snapshot import Snapshot
from gpucarve.engine import run_cycle
from gpucarve.engine.decisions import Plugin
from gpucarve.engine.explain import explain, render
from tests.engine.builders import cycle, policy, pool, queue, snapshot, submit, workload


def _policy(wait: bool) -> Any:
    return policy(
        pools=[pool("train", "H100-SXM5-80GB", 2, 8)],
        cohorts=[{"name": "lab"}],
        queues=[
            queue("lender", {"h100-full": {"nominal": 12}}, cohort="lab"),
            queue("borrower", {"h100-full": {"nominal": 4, "borrowingLimit": 12}}, cohort="lab"),
        ],
        scheduling={"loansWaitForLenders": wait},
    )


def _lent(p: Any) -> Snapshot:
    """The borrower holds 12 of the 16 GPUs (8 of them lent by the idle lender): 8 on one
    node, 4 on the other."""
    s = snapshot(
        p,
        [workload(p, "big", "borrower", gpus=8), workload(p, "small", "borrower", gpus=4)],
    )
    result, s = cycle(s, 0)
    assert sorted(result.admitted_ids()) == ["borrower/big", "borrower/small"]
    return s


def _then(p: Any, lender_pods: int, gpus: int = 8) -> tuple[list[str], Any]:
    """At 100 s (before reclaim may take anything: minRuntimeSeconds), the lender asks for
    `lender_pods` pods of `gpus` (whole nodes) and the borrower for 4 more GPUs, which are
    free."""
    s = submit(
        _lent(p),
        workload(p, "mine", "lender", gpus=gpus, pods=lender_pods, submit=100),
        workload(p, "more", "borrower", gpus=4, submit=100),
    )
    result, _ = cycle(s, 100)
    assert not result.evictions
    return result.admitted_ids(), result.pending_reason("borrower/more")


def test_the_lenders_waiting_work_keeps_its_quota_from_a_new_loan() -> None:
    admitted, reason = _then(_policy(wait=True), lender_pods=1)
    assert admitted == []
    assert reason is not None and reason.plugin is Plugin.CAPACITY_QUOTA
    assert "cohort lab has 0 to lend" in reason.message
    assert "8 more kept for work of queue lender that waits within its nominal quota" in (
        reason.message
    )


def test_without_the_option_the_unused_quota_is_lent() -> None:
    admitted, reason = _then(_policy(wait=False), lender_pods=1)
    assert admitted == ["borrower/more"] and reason is None


def test_lender_work_that_could_only_run_on_loan_keeps_nothing_back() -> None:
    # two whole nodes: 16 GPUs, past the lender's nominal 12
    admitted, reason = _then(_policy(wait=True), lender_pods=2)
    assert admitted == ["borrower/more"] and reason is None


def test_lender_work_no_node_could_hold_keeps_nothing_back() -> None:
    # one pod of 12 GPUs, within the lender's nominal 12, on nodes of 8: never admitted
    admitted, reason = _then(_policy(wait=True), lender_pods=1, gpus=12)
    assert admitted == ["borrower/more"] and reason is None


def test_a_lender_with_nothing_waiting_lends_as_before() -> None:
    p = _policy(wait=True)
    s = submit(_lent(p), workload(p, "more", "borrower", gpus=4, submit=100))
    result, _ = cycle(s, 100)
    assert result.admitted_ids() == ["borrower/more"]


def test_what_the_lender_was_given_in_the_cycle_is_no_longer_kept() -> None:
    # The lender's 4-GPU job fits on the free GPUs first (its queue borrows nothing, so it
    # goes first); then nothing of its waits, and its unused 8 can be lent again.
    p = _policy(wait=True)
    s = snapshot(p, [workload(p, "big", "borrower", gpus=8)])
    _, s = cycle(s, 0)
    s = submit(
        s,
        workload(p, "mine", "lender", gpus=4, submit=100),
        workload(p, "more", "borrower", gpus=4, submit=100),
    )
    result, _ = cycle(s, 100)
    assert sorted(result.admitted_ids()) == ["borrower/more", "lender/mine"]


def test_explain_names_the_lender_that_keeps_its_quota() -> None:
    p = _policy(wait=True)
    s = submit(
        _lent(p),
        workload(p, "mine", "lender", gpus=8, submit=100),
        workload(p, "more", "borrower", gpus=4, submit=100),
    )
    e = explain(s, run_cycle(s, 100), "borrower/more")
    assert e is not None and e.state == "pending"
    text = "\n".join(render(e))
    assert "queue lender keeps 8 h100-full of its unused nominal quota from loans" in text, text


def test_explain_counts_no_lender_work_that_can_never_be_admitted() -> None:
    # Every GPU is taken (the lender 4, the borrower 12 of which 8 lent): the borrower's next
    # job waits on the cohort either way; only lender work that could run keeps quota.
    p = _policy(wait=True)
    s = snapshot(
        p,
        [
            workload(p, "own", "lender", gpus=4),
            workload(p, "big", "borrower", gpus=8),
            workload(p, "small", "borrower", gpus=4),
        ],
    )
    _, s = cycle(s, 0)

    def hints(selector: dict[str, str] | None) -> str:
        s2 = submit(
            s,
            workload(p, "next", "lender", gpus=4, submit=100, node_selector=selector),
            workload(p, "more", "borrower", gpus=4, submit=100),
        )
        e = explain(s2, run_cycle(s2, 100), "borrower/more")
        assert e is not None and e.state == "pending"
        return "\n".join(e.hints)

    assert "queue lender keeps 4 h100-full" in hints(None)
    assert "keeps" not in hints({"gpucarve.io/pool": "nowhere"})  # no node matches
