"""One quota unit across a model's flavors: a queue's quota written in GPUs of a flavor prefix
(its MIG profiles, whole GPUs and shared replicas alike) is charged what each slice is worth,
borrows and lends through its cohort in the same unit, is reclaimed in it, and may be capped
per flavor."""

from __future__ import annotations

from typing import Any

import pytest

from gpucarve.config.catalog_file import packaged_catalog
from gpucarve.config.policy_build import build_policy
from gpucarve.core.problems import InvalidInput
from gpucarve.engine import run_cycle
from gpucarve.engine.decisions import Stage
from gpucarve.engine.explain import explain, render
from gpucarve.engine.quota import Limit
from gpucarve.render.namespaces import namespace_objects
from gpucarve.render.objects import queue_manifest
from gpucarve.webhook.admission import queue_problems
from tests.engine.builders import HEAD, cycle, policy, pool, queue, snapshot, submit, workload

LAYOUT = {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}


def _mig_pool(gpus: int = 2, **extra: Any) -> dict[str, Any]:
    return pool("inf", "A100-80GB", 1, gpus, "mig", mig={"layout": LAYOUT, **extra})


def test_units_are_built_per_flavor_prefix_with_each_slice_worth_its_memory_slices() -> None:
    p = policy(pools=[_mig_pool(), pool("dev", "L40S", 1, 1, "time-slicing", replicas=4)],
               queues=[queue("a", {"a100": {"nominal": 2}, "l40s": {"nominal": 1}})])  # fmt: skip
    a100 = p.units["a100"]
    assert a100.parts_per_gpu == 8 and a100.gpus == 2
    assert dict(a100.charges) == {
        "a100-mig-1g.10gb": 1,
        "a100-mig-2g.20gb": 2,
        "a100-mig-3g.40gb": 4,
    }
    l40s = p.units["l40s"]
    assert l40s.parts_per_gpu == 4 and dict(l40s.charges) == {"l40s-shared": 1}
    (q,) = p.queues
    assert {x.flavor: x.nominal for x in q.quotas} == {"a100": 16, "l40s": 4}


def test_a_unit_quota_admits_any_mix_of_profiles_up_to_its_gpus() -> None:
    # one GPU's worth: a 3g.40gb (half) and two 2g.20gb... but only one 2g exists per GPU;
    # with two GPUs: 3g + 2g + 1g + 1g = exactly one GPU
    p = policy(pools=[_mig_pool()], queues=[queue("a", {"a100": {"nominal": 1}})])
    ws = [
        workload(p, "big", "a", mig="3g.40gb"),
        workload(p, "mid", "a", mig="2g.20gb"),
        workload(p, "s1", "a", mig="1g.10gb"),
        workload(p, "s2", "a", mig="1g.10gb"),
        workload(p, "z-over", "a", mig="1g.10gb"),
    ]
    result = run_cycle(snapshot(p, ws), 0)
    assert sorted(a.workload for a in result.admissions) == ["a/big", "a/mid", "a/s1", "a/s2"]
    (pend,) = result.pending
    assert pend.workload == "a/z-over" and pend.reason.stage is Stage.QUOTA
    assert pend.reason.flavor == "a100"
    assert "queue a at 1/1 a100 GPUs, needs 0.125 more" in pend.reason.message


def test_fractional_gpus_in_steps_of_the_smallest_slice() -> None:
    p = policy(pools=[_mig_pool()], queues=[queue("a", {"a100": {"nominal": 0.75}})])
    assert p.queues[0].quotas[0].nominal == 6
    ws = [workload(p, "big", "a", mig="3g.40gb"), workload(p, "mid", "a", mig="2g.20gb"),
          workload(p, "small", "a", mig="1g.10gb")]  # fmt: skip
    result = run_cycle(snapshot(p, ws), 0)
    assert sorted(a.workload for a in result.admissions) == ["a/big", "a/mid"]


def test_a_flavor_quota_beside_the_unit_caps_that_flavor() -> None:
    capped = {"a100": {"nominal": 2}, "a100-mig-1g.10gb": {"nominal": 1}}
    p = policy(pools=[_mig_pool()], queues=[queue("a", capped)])
    ws = [workload(p, f"s{i}", "a", mig="1g.10gb") for i in range(3)]
    ws.append(workload(p, "big", "a", mig="3g.40gb"))
    result = run_cycle(snapshot(p, ws), 0)
    assert sorted(a.workload for a in result.admissions) == ["a/big", "a/s0"]
    reasons = {x.workload: x.reason for x in result.pending}
    assert reasons["a/s1"].flavor == "a100-mig-1g.10gb"


def _cohort_policy(borrowing: float | None = None) -> Any:
    lender: dict[str, Any] = {"nominal": 1}
    borrower: dict[str, Any] = {"nominal": 1}
    if borrowing is not None:
        borrower["borrowingLimit"] = borrowing
    return policy(
        pools=[_mig_pool()],
        cohorts=[{"name": "c"}],
        queues=[
            queue("lender", {"a100": lender}, cohort="c"),
            queue("borrower", {"a100": borrower}, cohort="c"),
        ],
    )


def test_a_queue_borrows_another_queues_unused_gpus_in_other_profiles() -> None:
    p = _cohort_policy()
    # two 3g.40gb are the borrower's one GPU; a 1g.10gb more is an eighth of one on loan
    ws = [workload(p, f"b{i}", "borrower", mig="3g.40gb") for i in range(2)]
    ws += [workload(p, "c-small", "borrower", mig="1g.10gb")]
    result, _ = cycle(snapshot(p, ws), 0)
    assert len(result.admissions) == 3
    borrowed = {a.workload: dict(a.borrowed) for a in result.admissions}
    assert borrowed == {"borrower/b0": {}, "borrower/b1": {}, "borrower/c-small": {"a100": 1}}


def test_the_borrowing_limit_counts_in_gpus() -> None:
    p = _cohort_policy(borrowing=0.25)
    ws = [workload(p, f"b{i}", "borrower", mig="3g.40gb") for i in range(2)]
    ws += [workload(p, "mid", "borrower", mig="2g.20gb")]
    ws += [workload(p, "s", "borrower", mig="1g.10gb")]
    result = run_cycle(snapshot(p, ws), 0)
    admitted = {a.workload for a in result.admissions}
    # 1 GPU nominal + 0.25 borrowed: both 3g.40gb and the 2g.20gb; the 1g.10gb is over
    assert admitted == {"borrower/b0", "borrower/b1", "borrower/mid"}
    (pend,) = result.pending
    assert pend.reason.limit == Limit.BORROWING_LIMIT
    assert "borrowing limit 0.25" in pend.reason.message


def test_reclaim_takes_back_unit_quota_lent_in_another_profile() -> None:
    p = _cohort_policy()
    # the borrower holds both 3g.40gb and both 2g.20gb: 1.5 GPUs, half a GPU on loan
    ws = [workload(p, f"b{i}", "borrower", mig="3g.40gb") for i in range(2)]
    ws += [workload(p, f"m{i}", "borrower", mig="2g.20gb") for i in range(2)]
    result, s = cycle(snapshot(p, ws), 0)
    assert len(result.admissions) == 4
    # the lender, within its nominal GPU, wants a 3g.40gb: quota has room (the loan is in
    # other profiles' terms) but every 3g.40gb is the borrower's; reclaim takes one back
    s = submit(s, workload(p, "mine", "lender", mig="3g.40gb", submit=4000))
    result, s = cycle(s, 4000)  # the invariants hold (checked by cycle)
    (ev,) = result.evictions
    assert ev.workload in ("borrower/b0", "borrower/b1") and ev.cause.value == "reclaim"
    assert [a.workload for a in result.admissions] == ["lender/mine"]


def test_explain_and_render_speak_gpus() -> None:
    p = policy(pools=[_mig_pool()], queues=[queue("a", {"a100": {"nominal": 0.5}})])
    ws = [workload(p, "big", "a", mig="3g.40gb"), workload(p, "s", "a", mig="1g.10gb")]
    s = snapshot(p, ws)
    result = run_cycle(s, 0)
    e = explain(s, result, "a/s")
    assert e is not None
    text = "\n".join(render(e))
    assert "a100 (GPUs)  0.5" in text
    assert "queue a holds" in text or "raise its nominal a100 GPUs" in text
    manifest = queue_manifest(p.queues[0], p.units)
    assert manifest["spec"]["quota"] == {"a100": {"nominal": 0.5}}
    quotas = [m for m in namespace_objects(p) if m["kind"] == "ResourceQuota"]
    (rq,) = quotas
    hard = rq["spec"]["hard"]
    # half a GPU: one 3g.40gb, two 2g.20gb (only two exist), four 1g.10gb
    assert hard["requests.nvidia.com/mig-3g.40gb"] == "1"
    assert hard["requests.nvidia.com/mig-2g.20gb"] == "2"
    assert hard["requests.nvidia.com/mig-1g.10gb"] == "4"


def test_the_webhook_checks_a_queue_objects_unit_quota() -> None:
    p = policy(pools=[_mig_pool()], queues=[queue("a", {"a100": {"nominal": 1}})])
    ok = {"metadata": {"name": "a"}, "spec": {"quota": {"a100": {"nominal": 1.5}}}}
    assert queue_problems(p, ok) == []
    bad = {"metadata": {"name": "a"}, "spec": {"quota": {
        "a100": {"nominal": 0.3}, "a100-mig-3g.40gb": {"nominal": 1.5}, "a100x": {"nominal": 1},
        "inf": {"nominal": 3}}}}  # fmt: skip
    codes = sorted(x.code for x in queue_problems(p, bad))
    assert codes == ["not-whole-parts", "not-whole-slices", "unknown-flavor", "unknown-flavor"]
    over = {"metadata": {"name": "a"}, "spec": {"quota": {"a100": {"nominal": 3}}}}
    assert [x.code for x in queue_problems(p, over)] == ["quota-exceeds-capacity"]


@pytest.mark.parametrize(
    ("quota", "code", "where"),
    [
        ({"a100": {"nominal": 0.3}}, "not-whole-parts", "nominal"),
        ({"a100": {"nominal": 1, "borrowingLimit": 0.1}}, "not-whole-parts", "borrowingLimit"),
        ({"a100-mig-3g.40gb": {"nominal": 1.5}}, "not-whole-slices", "nominal"),
        ({"a10": {"nominal": 1}}, "unknown-flavor", "a10"),
        ({"a100": {"nominal": 3}}, "quota-exceeds-capacity", "queues"),
    ],
)
def test_unit_quota_mistakes_name_the_field_and_the_fix(
    quota: dict[str, Any], code: str, where: str
) -> None:
    doc = {**HEAD, "pools": [_mig_pool()], "cohorts": [{"name": "c"}, {"name": "d"}],
           "queues": [queue("a", quota, cohort="c")]}  # fmt: skip
    with pytest.raises(InvalidInput) as exc:
        build_policy(doc, packaged_catalog())
    found = [x for x in exc.value.problems if x.code == code]
    assert found, [x.code for x in exc.value.problems]
    assert where in ".".join(str(part) for part in found[0].path)
    assert found[0].fix
