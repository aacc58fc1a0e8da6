"""The fragmentation scores kept between pods and cycles, by node state (a node changed moves to
the state it is in now, a new model scores the states), choose as scoring every candidate
afresh would: the same decisions, cycle by cycle, with the states kept and not."""

from __future__ import annotations

import random

import numpy as np
import pytest

from gpucarve.core.snapshot import Snapshot
from gpucarve.engine import Engine
from gpucarve.engine.apply import apply, finish
from gpucarve.engine.placement import frag_place
from tests.engine.builders import policy, pool, queue, snapshot, workload


def _decisions() -> list[str]:
    p = policy(
        pools=[
            pool("h", "H100-SXM5-80GB", 12, 8),
            pool("s", "L40S", 6, 4, "time-slicing", replicas=4),
        ],
        queues=[queue("a", {"h100-full": {"nominal": 96}, "l40s-shared": {"nominal": 96}})],
        scheduling={"minRuntimeSeconds": 0},
    )
    rng = random.Random(3)
    engine, s, out = Engine(), snapshot(p), []
    for step in range(10):
        new = []
        for i in range(rng.randint(5, 25)):
            kw = {"gpus": rng.choice([1, 1, 2, 4])} if rng.random() < 0.6 else {"shared": 1}
            new.append(workload(p, f"w{step}-{i}", "a", pods=rng.randint(1, 3), submit=step, **kw))
        s = Snapshot(p, s.cluster, s.running, (*s.pending, *new))
        result = engine.run_cycle(s, step * 10)
        out.append(repr(result.admissions))
        s = apply(s, result)
        s = finish(s, *(rw.workload.id for rw in s.running if rng.random() < 0.3))
    return out


def test_patched_and_memoised_scores_decide_as_fresh_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    kept = _decisions()
    assert sum(r.count("PodAssignment") for r in kept) > 100, "too few placements to compare"
    monkeypatch.setattr(frag_place, "STATES_LIMIT", 0)  # grouped anew whenever a node changed
    assert _decisions() == kept

    def fresh_always(self: frag_place.ModelPlacer, needs, candidates, t, pods):  # type: ignore[no-untyped-def]
        return self._fresh(needs, candidates, t, pods)

    monkeypatch.setattr(frag_place.ModelPlacer, "_scores", fresh_always)
    assert _decisions() == kept


def test_every_kept_answer_is_the_fresh_one_bit_for_bit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each answer of the kept scores (through nodes that changed and models that changed
    between cycles) equals scoring every candidate afresh, score and GPU, exactly."""
    real = frag_place.ModelPlacer._scores
    asked = []

    def checked(self: frag_place.ModelPlacer, needs, candidates, t, pods):  # type: ignore[no-untyped-def]
        score, gpu = real(self, needs, candidates, t, pods)
        fresh_score, fresh_gpu = self._fresh(needs, candidates, t, pods)
        assert np.array_equal(score, fresh_score) and np.array_equal(gpu, fresh_gpu)
        kept = self._cache[(t, pods, needs.mem, self.weights)]
        held = kept.of[kept.of >= 0]  # each state counts its candidates (empty ones wait)
        assert np.array_equal(kept.count, np.bincount(held, minlength=len(kept.count)))
        asked.append(self.model())
        return score, gpu

    monkeypatch.setattr(frag_place.ModelPlacer, "_scores", checked)
    _decisions()
    assert len(asked) > 100 and len({id(m) for m in asked}) > 5  # many models, many answers
