"""Elastic gangs (min..max pods): admitted at their minimum, grown pod by pod as room appears,
and shrunk back to their minimum first when preemption or reclaim needs room, never below."""

from __future__ import annotations

from gpucarve.engine import Cause, run_cycle
from gpucarve.engine.apply import apply, finish
from gpucarve.engine.invariants import check_step
from tests.engine.builders import cycle, policy, pool, queue, snapshot, submit, workload

P = policy(
    pools=[pool("train", "H100-SXM5-80GB", 4, 8)],
    queues=[
        queue("r", {"h100-full": {"nominal": 24, "borrowingLimit": 8}}, cohort="c"),
        queue("p", {"h100-full": {"nominal": 8}}, cohort="c"),
    ],
    cohorts=[{"name": "c"}],
    priorityClasses=[
        {"name": "batch", "value": 10, "preemptible": True, "default": True},
        {"name": "urgent", "value": 100, "preemptible": True},
    ],
    scheduling={"minRuntimeSeconds": 0},
)


def _pods(s, wid):  # type: ignore[no-untyped-def]
    return sorted(p.pod for rw in s.running if rw.workload.id == wid for p in rw.pods)


def test_an_elastic_gang_starts_at_its_minimum_and_grows_as_room_appears() -> None:
    s = snapshot(P, [workload(P, "hold", "r", gpus=8, pods=2)])
    _, s = cycle(s)
    s = submit(s, workload(P, "el", "r", gpus=8, pods=4, min_pods=2, submit=1))
    result, s = cycle(s, 10)
    (adm,) = result.admissions
    assert adm.workload == "r/el" and len(adm.pods) == 2
    assert "r/el" not in {p.workload for p in result.pending}  # it runs; it grows later
    s = finish(s, "r/hold")
    before = s
    result, s = cycle(s, 20)
    check_step(before, result, apply(before, result))
    (grown,) = result.admissions
    assert grown.workload == "r/el" and len(grown.pods) == 2
    assert _pods(s, "r/el") == [f"r/el/main-{i}" for i in range(4)]


def test_preemption_shrinks_an_elastic_gang_to_its_minimum_first() -> None:
    s = snapshot(P, [workload(P, "el", "r", gpus=8, pods=4, min_pods=2)])
    _, s = cycle(s)
    assert len(_pods(s, "r/el")) == 4
    s = submit(s, workload(P, "urgent", "r", gpus=8, pods=1, priority="urgent", submit=5))
    before = s
    result = run_cycle(s, 10)
    check_step(before, result, apply(before, result))
    (ev,) = result.evictions
    assert (ev.workload, ev.cause, ev.pods) == ("r/el", Cause.PREEMPT, ("r/el/main-3",))
    assert "gives back 1 pods and keeps running" in ev.message
    (adm,) = result.admissions
    assert adm.workload == "r/urgent" and adm.after_evictions == ("r/el",)
    after = apply(before, result)
    assert _pods(after, "r/el") == [f"r/el/main-{i}" for i in range(3)]


def test_an_elastic_gang_is_never_cut_below_its_minimum() -> None:
    s = snapshot(P, [workload(P, "el", "r", gpus=8, pods=3, min_pods=2)])
    _, s = cycle(s)
    # 16 GPUs wanted: the surplus (8) is not enough, so the whole gang goes
    s = submit(s, workload(P, "urgent", "r", gpus=8, pods=3, priority="urgent", submit=5))
    before = s
    result = run_cycle(s, 10)
    check_step(before, result, apply(before, result))
    assert [(e.workload, e.pods) for e in result.evictions] == [("r/el", ())]
