"""Preemption that never loops: over random cohorts, quotas and workload streams in a closed
system (arrivals in two waves, then nothing new and nothing ends), no chain of evictions ever
comes back to evict one of its own evictors (A evicts B, B's return evicts C, ..., which evicts
A), and the cluster settles: two quiet cycles in a row within a bounded number.

The eviction graph (evictor → victim, every cause: priority preemption, reclaim, consolidation
moves, a gang's timeout has no evictor) must stay acyclic. The existing ping-pong property
(`test_properties.py`) looks at pairs only; this one follows chains of any length, on more
cases: `LOOP_EXAMPLES` per CI run.

The property can fail: reclaim that ignores whether the victim's queue borrows (a deliberately
broken variant, `_broken_reclaim`) lets two queues within their nominal quotas take the same
GPUs from each other back and forth, and the property finds it (the last test).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from gpucarve.core.snapshot import Snapshot
from gpucarve.engine import Engine
from gpucarve.engine.apply import apply
from gpucarve.engine.preemption import Preemptor, _in_order, _Ranked
from gpucarve.engine.quota import Quotas
from tests.engine.builders import snapshot
from tests.engine.test_properties import clusters, random_workload
from tests.fuzz.budget import fuzz_settings

LOOP_EXAMPLES = 2000
MAX_CYCLES = 40


def _cycle_in(edges: dict[str, set[str]]) -> list[str] | None:
    """A cycle of the directed graph, as the workloads along it, or None."""
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(edges):
        if start not in state and (found := visit(start)) is not None:
            return found
    return None


def closed_system_runs_without_loops(data: st.DataObject, tree: bool | None = None) -> None:
    if tree is None:
        tree = data.draw(st.booleans())
    p = data.draw(clusters(cohort=tree or data.draw(st.booleans()), tree=tree))
    ws = [
        random_workload(data.draw, p, i, data.draw(st.integers(0, 50)))
        for i in range(data.draw(st.integers(1, 14)))
    ]
    s = snapshot(p)
    s = Snapshot(p, s.cluster, s.running, tuple(ws[: len(ws) // 2]))
    engine = Engine()
    edges: dict[str, set[str]] = {}
    quiet = 0
    for step in range(MAX_CYCLES):
        if step == 1:
            s = Snapshot(p, s.cluster, s.running, (*s.pending, *ws[len(ws) // 2 :]))
        result = engine.run_cycle(s, 1000 + step * 200)
        for ev in result.evictions:
            if ev.by:
                edges.setdefault(ev.by, set()).add(ev.workload)
        loop = _cycle_in(edges)
        assert loop is None, "evictions came back round: " + " evicted ".join(loop or [])
        s = apply(s, result)
        quiet = quiet + 1 if not result.admissions and not result.evictions else 0
        if quiet >= 2 and step > 1:
            return
    raise AssertionError(f"the system did not settle in {MAX_CYCLES} cycles")


@fuzz_settings(LOOP_EXAMPLES)
@given(data=st.data())
def test_no_chain_of_evictions_comes_back_and_the_cluster_settles(data: st.DataObject) -> None:
    closed_system_runs_without_loops(data)


def test_the_cycle_finder_finds_chains_of_any_length() -> None:
    assert _cycle_in({"a": {"b"}, "b": {"c"}}) is None
    assert _cycle_in({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle_in({"x": {"y"}, "y": {"y"}}) == ["y", "y"]


def _broken_reclaim(self: Preemptor, w: object, demand: object) -> list[object]:
    """Reclaim for any queue, from any other queue of its cohort, borrowing or not."""
    q: Quotas = self.quotas
    cohort = q.queues[w.queue].cohort  # type: ignore[attr-defined]
    if cohort is None:
        return []
    out: list[_Ranked] = []
    for other in q.members.get(cohort, ()):
        if other != w.queue:  # type: ignore[attr-defined]
            for rw in self._running_of(other):
                out += self._ranked(rw)
    return _in_order(out)  # type: ignore[return-value]


@contextmanager
def _broken() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Preemptor, "reclaim_candidates", _broken_reclaim)
        mp.setattr(Preemptor, "_lends_back", lambda *_: True)
        mp.setattr(Preemptor, "_within_loans", lambda *_: True)
        mp.setattr(Quotas, "within_nominal", lambda *_: True)
        yield


def _reclaim_ignoring_the_tree(self: Preemptor, w: object, demand: object) -> list[object]:
    """Reclaim from any queue of the tree that borrows of its own cohort, whether or not the
    reclaimer's side stays within what it holds where the two meet."""
    q: Quotas = self.quotas
    keys = set(q.charge(w.queue, demand))  # type: ignore[attr-defined, arg-type]
    out: list[_Ranked] = []
    for other in q.tree_queues(w.queue):  # type: ignore[attr-defined]
        if other != w.queue and any(q.borrowed(other, k) > 0 for k in keys):  # type: ignore[attr-defined]
            for rw in self._running_of(other):
                out += self._ranked(rw)
    return _in_order(out)  # type: ignore[return-value]


def test_the_property_catches_reclaim_that_ignores_the_tree() -> None:
    def on_trees(data: st.DataObject) -> None:
        closed_system_runs_without_loops(data, tree=True)

    caught = settings(
        fuzz_settings(LOOP_EXAMPLES), max_examples=LOOP_EXAMPLES, phases=[Phase.generate]
    )(given(data=st.data())(on_trees))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Preemptor, "reclaim_candidates", _reclaim_ignoring_the_tree)
        mp.setattr(Preemptor, "_lends_back", lambda *_: True)
        mp.setattr(Preemptor, "_within_loans", lambda *_: True)
        with pytest.raises(AssertionError, match=r"came back round|did not settle"):
            caught()


def test_the_property_catches_reclaim_that_ignores_borrowing() -> None:
    def any_shape(data: st.DataObject) -> None:
        closed_system_runs_without_loops(data)

    caught = settings(
        fuzz_settings(LOOP_EXAMPLES), max_examples=LOOP_EXAMPLES, phases=[Phase.generate]
    )(given(data=st.data())(any_shape))
    with _broken(), pytest.raises(AssertionError, match=r"came back round|did not settle"):
        caught()
