"""Draining for whole-GPU dynamic MIG: when MIG work within its quota waits for instances that
no free one or reconfiguration gives, while instances nobody waits for sit free, the GPU
expected to empty soonest takes no new work, empties, and is repartitioned; without `drain`
it is refilled in its old layout."""

from __future__ import annotations

import dataclasses
from typing import Any

from gpucarve.core.snapshot import Snapshot
from gpucarve.core.workload import Workload
from tests.engine.builders import cycle, policy, pool, queue, snapshot, submit, workload

LAYOUT = {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}


def _policy(drain: bool) -> Any:
    dynamic = {"minSecondsBetweenChanges": 0, "maxGpusPerCycle": 2, "drain": drain}
    return policy(
        pools=[pool("inf", "A100-80GB", 1, 2, "mig", mig={"layout": LAYOUT, "dynamic": dynamic})],
        queues=[queue("team", {"a100": {"nominal": 2}})],
    )


def _ends(w: Workload, seconds: int) -> Workload:
    # a deadline bounds what the engine expects (a claim could only lengthen the default)
    return dataclasses.replace(w, runtime_limit_s=seconds)


def _busy(p: Any) -> Snapshot:
    """gpu0 runs a 3g.40gb job expected for 10,000 s, gpu1 a 1g.10gb one for 2,000 s; both
    GPUs' 2g.20gb instances are free and nobody asks for one."""
    s = snapshot(p, [_ends(workload(p, "long", "team", mig="3g.40gb"), 10_000)])
    _, s = cycle(s, 0)
    s = submit(s, _ends(workload(p, "short", "team", mig="1g.10gb", submit=1), 2_000))
    _, s = cycle(s, 1)
    gpu_of = {rw.workload.id: rw.pods[0].slice_ids[0].split("/")[1] for rw in s.running}
    assert gpu_of == {"team/long": "gpu0", "team/short": "gpu0"}
    return s


def _three_big(p: Any, s: Snapshot, at: int) -> Snapshot:
    return submit(s, *(workload(p, f"big{i}", "team", mig="3g.40gb", submit=at) for i in range(3)))


def test_the_gpu_that_empties_soonest_takes_no_new_work_and_is_then_reshaped() -> None:
    p = _policy(drain=True)
    s = _busy(p)
    # both jobs landed on gpu0 (packed): gpu1 is idle, and a drain keeps it so, so the
    # repartition after the queue reshapes it for the three 3g.40gb waiting
    s = _three_big(p, s, 100)
    result, s = cycle(s, 100)
    assert [d.gpu_id for d in result.drains] == ["inf-0/gpu1"]
    assert "3g.40gb waiting in pool inf" in result.drains[0].reason
    assert not result.admissions
    (rep,) = result.repartitions
    assert rep.gpu_id == "inf-0/gpu1"
    assert [i.profile for i in rep.layout] == ["3g.40gb", "3g.40gb"]


def test_without_drain_the_idle_gpu_is_refilled_in_its_old_layout() -> None:
    p = _policy(drain=False)
    s = _three_big(p, _busy(p), 100)
    result, _ = cycle(s, 100)
    assert not result.drains and not result.repartitions
    assert [a.workload for a in result.admissions] == ["team/big0"]


def test_a_busy_gpu_is_drained_while_its_work_runs_soonest_first() -> None:
    p = _policy(drain=True)
    s = _busy(p)
    # an idle gpu1 first takes a 3g.40gb + 1g.10gb workload each, so both GPUs are busy:
    # gpu1's work is expected to end at 500, gpu0's at 10,000
    s = submit(s, _ends(workload(p, "x", "team", mig="3g.40gb", submit=2), 498))
    result, s = cycle(s, 2)
    assert [a.workload for a in result.admissions] == ["team/x"]
    s = _three_big(p, s, 3)
    result, s = cycle(s, 3)
    assert [d.gpu_id for d in result.drains] == ["inf-0/gpu1"]
    assert result.drains[0].until == 500
    assert not result.admissions  # gpu1's free instances take nothing new
    assert not result.repartitions  # it is still busy


def test_no_drain_when_the_free_instances_serve_what_waits_or_all_are_wanted() -> None:
    p = _policy(drain=True)
    s = _busy(p)
    # gpu0 has a free 2g.20gb and 1g.10gb, gpu1 all four instances: 2 × 2g.20gb fit
    fits = [workload(p, f"mid{i}", "team", mig="2g.20gb", submit=5) for i in range(2)]
    result, _ = cycle(submit(s, *fits), 5)
    assert not result.drains and len(result.admissions) == 2
    # one 2g.20gb short, but every free instance is wanted: nothing carved is nobody's
    more = [workload(p, f"mid{i}", "team", mig="2g.20gb", submit=5) for i in range(3)]
    more += [workload(p, f"small{i}", "team", mig="1g.10gb", submit=5) for i in range(3)]
    more += [workload(p, "big", "team", mig="3g.40gb", submit=5)]
    result, _ = cycle(submit(s, *more), 5)
    assert not result.drains
