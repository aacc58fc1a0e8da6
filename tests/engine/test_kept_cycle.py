"""A reused engine keeps a cycle's own changes (`Engine`, `Working.commit`) and, when the next
snapshot carries out its result, follows only the steps after it: the state it reaches that way
must be the state a fresh working copy of the new snapshot has, field by field, through
admissions, evictions (reclaim and priority preemption), MIG and shared GPUs, and completions;
and a snapshot not derived from the result must be reached all the same."""

from __future__ import annotations

import copy
import random
from typing import TypeVar

import pytest

from gpucarve.core.snapshot import Snapshot
from gpucarve.engine import Engine
from gpucarve.engine.apply import apply, finish
from gpucarve.engine.working import Working
from tests.engine.builders import mixed_arrivals as arrivals
from tests.engine.builders import mixed_policy, snapshot

T = TypeVar("T")


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_a_kept_cycle_reaches_the_state_a_fresh_copy_of_the_next_snapshot_has(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced = []
    sync = Working.sync

    def counted(ws: Working, old: Snapshot, new: Snapshot) -> None:
        synced.append(new)
        sync(ws, old, new)

    monkeypatch.setattr(Working, "sync", counted)
    p = mixed_policy()
    rng = random.Random(seed)
    engine, s = Engine(), snapshot(p)
    evicted = admitted = 0
    for step in range(15):
        s = Snapshot(p, s.cluster, s.running, (*s.pending, *arrivals(p, rng, step)), s.delta)
        ws = engine._working(s)
        assert ws.comparable() == Working(s).comparable(), f"cycle {step}: kept state differs"
        result = engine.run_cycle(s, step * 10)
        evicted += len(result.evictions)
        admitted += len(result.admissions)
        s = apply(s, result)
        done = [rw.workload.id for rw in s.running if rng.random() < 0.3]
        s = finish(s, *done)
    assert not synced  # every cycle was followed from the step after its own, never compared
    assert admitted > 10


def test_evictions_are_kept_as_the_step_gives_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """Across seeds the stream above evicts; this one checks that it does, so the comparison
    covers victims given back inside a kept cycle."""
    p = mixed_policy()
    total = 0
    for seed in range(1, 6):
        rng = random.Random(seed)
        engine, s = Engine(), snapshot(p)
        for step in range(15):
            s = Snapshot(p, s.cluster, s.running, (*s.pending, *arrivals(p, rng, step)), s.delta)
            result = engine.run_cycle(s, step * 10)
            total += len(result.evictions)
            s = apply(s, result)
            s = finish(s, *[rw.workload.id for rw in s.running if rng.random() < 0.3])
    assert total > 0


def test_a_snapshot_not_derived_from_the_result_is_reached_all_the_same() -> None:
    p = mixed_policy()
    rng = random.Random(7)
    engine, s = Engine(), snapshot(p)
    s = Snapshot(p, s.cluster, s.running, tuple(arrivals(p, rng, 0)), s.delta)
    result = engine.run_cycle(s, 0)
    assert result.admissions
    # the same cluster again, and a sibling derived from it by another step: no result kept
    again = engine._working(s)
    assert again.comparable() == Working(s).comparable()
    engine.run_cycle(s, 0)
    sibling = finish(s, *[rw.workload.id for rw in s.running]) if s.running else s
    sibling = Snapshot(p, sibling.cluster, sibling.running, sibling.pending, s.delta_with())
    assert engine._working(sibling).comparable() == Working(sibling).comparable()


def rebuilt_view(s: Snapshot, rng: random.Random | None) -> Snapshot:
    """`s` as the scheduler's view gives it: no history, new containers, and (with `rng`)
    about half of the allocations and running workloads rebuilt as new, equal objects, as
    the view does for the gangs whose pods it works out again."""

    def again(x: T) -> T:
        return copy.copy(x) if rng is not None and rng.random() < 0.5 else x

    allocs = {sid: again(a) for sid, a in s.cluster.allocations.items()}
    running = tuple(again(rw) for rw in s.running)
    return Snapshot(s.policy, s.cluster.with_allocations(allocs), running, tuple(s.pending))


@pytest.mark.parametrize("view", ["kept", "copied", "derived"])
def test_a_driver_of_rebuilt_views_undoes_the_kept_cycle_instead_of_applying_it(
    view: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`Engine(rebuilt_views=True)` (the Kubernetes scheduler's): each next snapshot rebuilt,
    with no delta, is reached by undoing the last cycle and comparing with the snapshot before
    it, never by applying the result to the whole cluster; a derived one (the simulator's) by
    following its steps. Either way the state is a fresh copy's and the results are a plain
    engine's. `copied`: the comparison goes by identity first, so a view that rebuilds part
    of what did not change as equal objects must still read as no change there."""
    import gpucarve.engine.engine as engine_module

    def no_apply(*_: object) -> None:
        raise AssertionError("the result applied to the whole cluster")

    p = mixed_policy()
    rng = random.Random(11)
    rebuilt, plain, s = Engine(rebuilt_views=True), Engine(), snapshot(p)
    evicted = admitted = 0
    for step in range(15):
        s = Snapshot(p, s.cluster, s.running, (*s.pending, *arrivals(p, rng, step)), s.delta)
        if view != "derived":  # as the scheduler's view: equal values, no history
            s = rebuilt_view(s, rng if view == "copied" else None)
        with monkeypatch.context() as m:
            m.setattr(engine_module, "apply", no_apply)
            ws = rebuilt._working(s)
        assert ws.comparable() == Working(s).comparable(), f"cycle {step}: state differs"
        assert not ws.log and not ws.running_before  # nothing of the last cycle left over
        result = rebuilt.run_cycle(s, step * 10)
        assert result == plain.run_cycle(s, step * 10)
        evicted += len(result.evictions)
        admitted += len(result.admissions)
        s = apply(s, result)
        s = finish(s, *[rw.workload.id for rw in s.running if rng.random() < 0.3])
    assert admitted > 10 and evicted > 0


def test_one_allocation_object_under_two_slices_is_refused_not_followed() -> None:
    """Identity tells the changes apart only if each object stands for one slice: a view that
    broke that would hide a slice's change (and hand it out twice), so it is refused."""
    p = mixed_policy()
    rng = random.Random(3)
    engine, s = Engine(rebuilt_views=True), snapshot(p)
    s = Snapshot(p, s.cluster, s.running, tuple(arrivals(p, rng, 0)))
    s = apply(s, engine.run_cycle(s, 0))
    engine.run_cycle(rebuilt_view(s, None), 10)
    allocs = dict(s.cluster.allocations)
    first, second = sorted(allocs)[:2]
    allocs[second] = allocs[first]
    broken = Snapshot(p, s.cluster.with_allocations(allocs), s.running, ())
    with pytest.raises(ValueError, match="one allocation object stands for two slices"):
        engine.run_cycle(broken, 20)


@pytest.mark.parametrize("rebuilt_views", [True, False])
def test_what_the_queues_hold_is_read_from_the_kept_cycle(rebuilt_views: bool) -> None:
    """`Engine.held` (the scheduler's queue statuses read it) equals what a pass over the
    snapshot's running workloads and the result gives, through admissions, evictions and
    completions, and each queue's running workloads are those the result leaves."""
    from gpucarve.engine.usage import evicted_pods, usage_after

    p = mixed_policy()
    rng = random.Random(7)
    engine, s = Engine(rebuilt_views=rebuilt_views), snapshot(p)
    assert engine.held() is None
    evicted = 0
    for step in range(20):
        s = Snapshot(p, s.cluster, s.running, (*s.pending, *arrivals(p, rng, step)), s.delta)
        if rebuilt_views:
            s = rebuilt_view(s, rng)
        result = engine.run_cycle(s, step * 10)
        held = engine.held()
        assert held is not None
        assert held.slices == {k: n for k, n in usage_after(s.running, result).items() if n}
        evicted += len(result.evictions)
        gone = {w for w, pods in evicted_pods(result).items() if pods is None}
        s = apply(s, result)
        running: dict[str, int] = {}
        for rw in s.running:
            running[rw.workload.queue] = running.get(rw.workload.queue, 0) + 1
        assert held.running == running, f"cycle {step}"
        assert not gone & {rw.workload.id for rw in s.running}
        s = finish(s, *[rw.workload.id for rw in s.running if rng.random() < 0.3])
    assert evicted > 0
