"""Where changed nodes sit among a request's candidates (`frag_place._positions`): the
scores kept for the candidates are patched at exactly those places, one node or many."""

from __future__ import annotations

import random

import numpy as np

from gpucarve.engine.placement.frag_place import _positions


def _reference(candidates: list[int], nodes: list[int]) -> list[int]:
    return sorted({candidates.index(n) for n in nodes if n in candidates})


def test_changed_nodes_are_found_among_the_candidates_once_each() -> None:
    rng = random.Random(7)
    tried_one = tried_many = 0
    for _ in range(400):
        candidates = sorted(rng.sample(range(60), rng.randint(0, 20)))
        if rng.random() < 0.5:
            nodes = [rng.randrange(62)] * rng.randint(1, 8)  # one node, once per GPU touched
            tried_one += 1
        else:
            nodes = [rng.randrange(62) for _ in range(rng.randint(1, 8))]
            tried_many += 1
        got = _positions(np.asarray(candidates, dtype=np.intp), nodes)
        assert got.tolist() == _reference(candidates, nodes), (candidates, nodes)
    assert tried_one > 100 and tried_many > 100


def test_a_node_past_the_last_candidate_or_before_the_first_is_not_found() -> None:
    candidates = np.asarray([3, 5, 9], dtype=np.intp)
    assert _positions(candidates, [10, 10]).tolist() == []
    assert _positions(candidates, [0]).tolist() == []
    assert _positions(candidates, [9]).tolist() == [2]
    assert _positions(candidates, [4]).tolist() == []
    assert _positions(np.zeros(0, dtype=np.intp), [4]).tolist() == []
