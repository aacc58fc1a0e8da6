"""An admission that waits for its victims holds the free slices its placement chose: a pod
made meanwhile (the moved pod's replacement) is placed elsewhere, and the victims' own slices
are not held twice. The API server's side is
tests/integration/test_consolidation.py::test_a_replicas_pod_is_moved_so_that_a_pod_that_fits_nowhere_binds."""

from __future__ import annotations

import dataclasses

from gpucarve.core.snapshot import Snapshot
from gpucarve.engine import run_cycle
from gpucarve.kube.scheduler.evictions import (
    AWAITING,
    awaited_holds,
    awaited_slices,
    refusal,
    with_held,
)
from tests.engine.builders import slices_held, submit, workload
from tests.engine.test_consolidate import MOVE, split, two_nodes


def hold_awaited(s: Snapshot, holding: dict[str, tuple[str, ...]]) -> Snapshot:
    """The snapshot as the scheduler's loop hands it to the engine."""
    return with_held(s, awaited_holds(s, holding))


def _awaiting() -> tuple[Snapshot, dict[str, tuple[str, ...]], list[str]]:
    """big (8 GPUs) admitted to c's node once c (4 GPUs) is gone; c still terminating."""
    p = two_nodes(**MOVE)
    s = submit(split(p), workload(p, "big", "r", gpus=8, submit=200))
    result = run_cycle(s, 1000)
    (adm,) = result.admissions
    assert adm.after_evictions == ("r/c",)
    return s, awaited_slices(result), slices_held(s, "r/c")


def test_the_free_slices_of_an_awaited_admission_are_held_for_it() -> None:
    s, holding, victims = _awaiting()
    assert len(holding["r/big"]) == 8
    held = hold_awaited(s, holding)
    owners = {sid: a.owner for sid, a in held.cluster.allocations.items()}
    # the four free GPUs beside c are big's; c's four stay c's
    assert sorted(sid for sid, o in owners.items() if o == f"{AWAITING}r/big") == sorted(
        set(holding["r/big"]) - set(victims)
    )
    assert all(owners[sid] != f"{AWAITING}r/big" for sid in victims)
    assert held.check() == []
    # nothing awaited: the same snapshot
    assert hold_awaited(s, {}) is s


def test_pods_made_while_the_victim_terminates_never_take_the_held_slices() -> None:
    s, holding, _ = _awaiting()
    # c's replacement and another 4-GPU job arrive; 4 GPUs are free beside a, 4 are big's
    made = tuple(workload(s.policy, n, "r", gpus=4, submit=1001) for n in ("c2", "d"))
    # as the API server shows it: c is terminating, big is out of the cycle
    running = tuple(
        dataclasses.replace(rw, terminating=True) if rw.workload.id == "r/c" else rw
        for rw in s.running
    )
    waiting = dataclasses.replace(s, running=running, pending=made)
    result = run_cycle(hold_awaited(waiting, holding), 1001)
    (adm,) = result.admissions  # one of them, beside a; the other waits
    placed = {sid for pod in adm.pods for sid in pod.slice_ids}
    assert not placed & set(holding["r/big"])
    beside_a = {pod.node for rw in s.running if rw.workload.id == "r/a" for pod in rw.pods}
    assert {pod.node for pod in adm.pods} == beside_a


def test_a_refusal_names_a_disruption_budget_only_for_its_429() -> None:
    budget = refusal({"ns/b": 429, "ns/a": 429})
    assert budget == (
        "preemption/refused: the eviction of ns/a, ns/b was refused (a PodDisruptionBudget); "
        "asked again in 10 s"
    )
    assert "(HTTP 403/429)" in refusal({"ns/a": 403, "ns/b": 429})
