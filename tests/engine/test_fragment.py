"""The fragmentation model on hand-built nodes whose answer is known: what each request type may
use where it may go, demand that follows the recent mix, and equal states scored once."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from gpucarve.engine.placement.fragment import (
    BEST_FIT_WEIGHT,
    CAPACITY_WEIGHT,
    CPU_WEIGHT,
    PRIOR_CPU_CAP,
    PRIOR_PODS,
    FragmentModel,
    Reach,
    RequestType,
    best_fit,
    model_of,
    take_whole,
    whole_node_prior,
)

EMPTY2 = [1000, 1000, -1, -1, -1, -1, -1, -1]


def rows(*r: list[int]) -> np.ndarray:
    return np.asarray(r, dtype=np.int64)


def ints(*v: int) -> np.ndarray:
    return np.asarray(v, dtype=np.int64)


def test_unconstrained_work_leaves_the_node_only_a_constrained_type_may_use() -> None:
    # Two empty 2-GPU nodes of classes 0 and 1; a third of the pods may only use class 1.
    anywhere = RequestType(1000, 1, 1000)
    only_1 = RequestType(1000, 1, 1000, frozenset({1}))
    model = FragmentModel(Counter({anywhere: 2, only_1: 1}), classes=2)
    score, _ = model.score(rows(EMPTY2, EMPTY2), ints(8000, 8000), ints(0, 1), 1000, 1, 1000)
    assert score[0] > score[1]


def test_a_type_allowed_nowhere_changes_no_choice() -> None:
    share = RequestType(1000, 1, 500)
    whole = RequestType(1000, 2, 1000)
    nowhere = RequestType(1000, 1, 300, frozenset({7}))  # class 7 does not exist
    base = FragmentModel(Counter({share: 3, whole: 1}), classes=2)
    more = FragmentModel(Counter({share: 3, whole: 1, nowhere: 4}), classes=2)
    nodes = rows([500, 1000, -1, -1, -1, -1, -1, -1], EMPTY2, [200, 1000, 1000, 1000] + [-1] * 4)
    cpu, cls = ints(8000, 8000, 8000), ints(0, 1, 0)
    a, ga = base.score(nodes, cpu, cls, 1000, 1, 500)
    b, gb = more.score(nodes, cpu, cls, 1000, 1, 500)
    assert np.argmax(a) == np.argmax(b)
    assert ga is not None and gb is not None and (ga == gb).all()
    # the weights of the rest are diluted, so compare the ranking, scaled
    assert np.allclose(np.argsort(a), np.argsort(b))


def test_capacity_weighting_steers_shares_off_the_scarce_model() -> None:
    # Class 1 holds a quarter of the GPUs; a fifth of the demand is whole GPUs limited to it.
    # A share that may go anywhere goes to class 0, keeping class 1's GPUs whole, and with
    # capacity weights by a wider margin: that demand presses on a quarter of the cluster.
    anywhere = RequestType(1000, 1, 500)
    only_1 = RequestType(1000, 1, 1000, frozenset({1}))
    mix = Counter({anywhere: 4, only_1: 1})
    plain = FragmentModel(mix, classes=2)
    weighted = FragmentModel(mix, classes=2, capacity=[6000.0, 2000.0])
    nodes, cpu, cls = rows(EMPTY2, EMPTY2), ints(8000, 8000), ints(0, 1)
    p, _ = plain.score(nodes, cpu, cls, 1000, 1, 500)
    w, _ = weighted.score(nodes, cpu, cls, 1000, 1, 500)
    assert p[0] > p[1] and w[0] > w[1]
    # in units of each model's total weight, so the two margins compare
    assert (w[0] - w[1]) / weighted.weight[:, -1].max() > (p[0] - p[1]) / plain.weight[:, -1].max()


def test_partly_used_gpus_strand_capacity_for_whole_gpu_types() -> None:
    whole = RequestType(0, 1, 1000)
    model = FragmentModel(Counter({whole: 1}), classes=1)
    stranded = model.frag(rows([600, 1000] + [-1] * 6), ints(0), ints(0))
    assert stranded[0] == pytest.approx(600.0)  # the 600 left on a used GPU
    # too little CPU for the type: everything free is stranded
    cpu_type = RequestType(4000, 1, 1000)
    m2 = FragmentModel(Counter({cpu_type: 1}), classes=1)
    assert m2.frag(rows([600, 1000] + [-1] * 6), ints(2000), ints(0))[0] == pytest.approx(1600.0)


def test_filled_up_term_counts_cpu_and_gpu_slots() -> None:
    # Every GPU pod takes half a GPU and 4 CPUs: a node with 2 free GPUs has 4 GPU slots, but
    # with 8 CPUs left only 2 pods run, stranding 1000 milli; with 16 CPUs nothing strands.
    model = FragmentModel(Counter({RequestType(4000, 1, 500): 2}), classes=1)
    node = rows(EMPTY2)
    _, slots = model.slot_sums(node)
    free = ints(2000)
    # the CPU-starved term counts the same 1000 milli: 8 CPUs feed 1000 at the mix's rate
    assert model.filled(slots, free, ints(8000), ints(0))[0] == pytest.approx(
        CAPACITY_WEIGHT * 1000 + CPU_WEIGHT * 1000
    )
    assert model.filled(slots, free, ints(16000), ints(0))[0] == pytest.approx(0.0)


def test_cpu_starved_term_follows_the_mix_allowed_on_each_class(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # class 0 sees pods of 500 milli per 4 CPUs, class 1 only pods of 500 milli per CPU: the
    # same node state (2 free GPUs, 8 CPUs) is CPU-starved on class 0 only
    mix = Counter({RequestType(4000, 1, 500, frozenset({0})): 1, RequestType(1000, 1, 500): 1})
    model = FragmentModel(mix, classes=2)
    node = rows(EMPTY2, EMPTY2)
    _, slots = model.slot_sums(node)
    got = model.filled(slots, ints(2000, 2000), ints(8000, 8000), ints(0, 1))
    assert model.milli_per_cpu[1] == pytest.approx(0.5)
    assert model.milli_per_cpu[0] == pytest.approx(1000 / 5000)
    starved0 = max(0.0, 2000 - 8000 * model.milli_per_cpu[0])
    assert starved0 > 0
    assert got[0] - got[1] > 0  # class 0's node counts its starved GPU milli

    # and the placement that leaves CPU in step with free GPUs scores better: a 1-CPU share on
    # a node with 8 CPUs left beats a 4-CPU share there, other things equal
    def margin(m: FragmentModel) -> float:
        light = m.score(node[:1], ints(8000), ints(0), 1000, 1, 500)[0][0]
        heavy = m.score(node[:1], ints(8000), ints(0), 4000, 1, 500)[0][0]
        return float(light - heavy)

    monkeypatch.setattr("gpucarve.engine.placement.fragment.CPU_WEIGHT", 0.0)
    without = FragmentModel(mix, classes=2)
    assert margin(model) > margin(without) + 100  # the term adds what the heavy one starves


def test_a_node_a_big_type_takes_whole_is_not_cpu_starved() -> None:
    # The mix asks 1 GPU per 16 CPUs, so 32 CPUs feed 2,000 milli at its rate; but an 8-GPU
    # pod asking 32 CPUs would take the empty 8-GPU node whole: none of it is starved.
    small, big = RequestType(16000, 1, 1000), RequestType(32000, 8, 1000)
    model = FragmentModel(Counter({small: 8, big: 1}), classes=1)
    empty = rows([1000] * 8)
    _, slots = model.slot_sums(empty)
    got = model.filled(slots, ints(8000), ints(32000), ints(0))[0]
    small_only = FragmentModel(Counter({small: 8}), classes=1)
    _, slots = small_only.slot_sums(empty)
    starved = small_only.filled(slots, ints(8000), ints(32000), ints(0))[0]
    # without the big type the same node is starved of 6,000 milli (weighted)
    assert starved >= CPU_WEIGHT * 6000 * 0.99
    # with it, what is left is the filled-up term alone (the small type's 6 GPUs without CPU)
    assert got < CAPACITY_WEIGHT * 8000
    # and one small pod does not break the empty node the big type needs when another would do
    nodes = rows([1000] * 8, [0, 0, 0, 0, 0, 0, 1000, 1000])
    score, _ = model.score(nodes, ints(32000, 32000), ints(0, 0), 16000, 1, 1000)
    assert score[1] > score[0]


def test_reach_by_node_shape_weighs_a_type_only_big_nodes_can_host() -> None:
    # One 128-CPU and three 96-CPU empty 8-GPU nodes; one pod in 40 is an 8-GPU pod asking
    # 120 CPUs, which only the big node can host. By class alone that type weighs its share of
    # the pods; by node shape it presses on a quarter of the GPUs, four times as hard, so a
    # small pod keeps off the big node by a wider margin (the one-pod-ahead term alone already
    # keeps it off: the margin is what other terms would have to outweigh).
    small, big = RequestType(12000, 1, 1000), RequestType(120000, 8, 1000)
    mix = Counter({small: 39, big: 1})
    cpu = ints(128000, 96000, 96000, 96000)
    gpus = ints(8, 8, 8, 8)
    by_class = FragmentModel(mix, classes=1, capacity=[32000.0])
    reach = Reach.of(ints(0, 0, 0, 0), cpu, gpus, gpus.astype(np.float64) * 1000)
    by_shape = FragmentModel(mix, classes=1, capacity=reach)
    assert reach.of_types([small, big], np.ones((2, 1), dtype=bool)).tolist() == [32000, 8000]
    nodes, cls = rows(*([[1000] * 8] * 4)), ints(0, 0, 0, 0)

    def margin(m: FragmentModel) -> float:
        score, _ = m.score(nodes, cpu, cls, 12000, 1, 1000)
        assert int(np.argmax(score)) == 1  # a 96-CPU node, the lowest
        return float(score[1] - score[0]) / float(m.weight[:, -1].max())

    assert margin(by_shape) > 3 * margin(by_class)


def test_equal_node_states_score_as_if_scored_one_by_one() -> None:
    mix = Counter(
        {RequestType(4000, 1, 300): 3, RequestType(8000, 1, 700): 2, RequestType(2000, 2, 1000): 1}
    )
    model = FragmentModel(mix, classes=2)
    base = [1000] * 4 + [-1] * 4
    used = [700, 1000, 1000, 1000] + [-1] * 4
    nodes = rows(base, used, base, used, base, base)
    cpu, cls = ints(16000, 16000, 16000, 24000, 16000, 16000), ints(0, 0, 1, 0, 0, 1)
    for cpu_req, n, m in ((4000, 1, 300), (8000, 1, 700), (2000, 2, 1000)):
        grouped, choice = model.score(nodes, cpu, cls, cpu_req, n, m)
        alone, alone_choice = model._score(nodes, cpu, cls, cpu_req, n, m)
        assert np.allclose(grouped, alone)
        if choice is not None:
            assert alone_choice is not None and (choice == alone_choice).all()


def test_model_is_a_function_of_the_mix() -> None:
    a, b = RequestType(1000, 1, 500), RequestType(1000, 1, 1000)
    first = model_of({a: 3, b: 1}, 1, None)
    assert model_of({b: 1, a: 3}, 1, first) is first  # the same mix, in any order
    again = model_of({a: 3, b: 2}, 1, first)
    assert again is not first and again[0] != first[0]
    # CPU-only types and emptied counts are not part of the mix
    assert (
        model_of({a: 3, b: 1, RequestType(500, 0, 0): 4, RequestType(9, 1, 50): 0}, 1, first)
        is first
    )
    with pytest.raises(ValueError, match="at least one"):
        FragmentModel({a: 1}, classes=0)


def brute_frag(mix: dict[RequestType, int], row: list[int], cpu: int, cls: int) -> float:
    """FGD's measure written out per type: what each type could not use here, weighted."""
    total = sum(mix.values())
    out = 0.0
    free = sum(v for v in row if v > 0)
    for t, n in mix.items():
        w = n / total
        allowed = t.access is None or cls in t.access
        if not allowed or t.cpu > cpu:
            out += w * free
        elif t.milli < 1000:
            out += w * sum(v for v in row if 0 < v < t.milli)
        else:
            whole = sum(1 for v in row if v == 1000)
            out += w * (free if whole < t.num_gpu else sum(v for v in row if 0 < v < 1000))
    return out


def test_grouped_tables_match_the_measure_written_out() -> None:
    rng = np.random.default_rng(5)
    mix = {
        RequestType(4000, 1, 300): 5,
        RequestType(8000, 1, 700, frozenset({1})): 2,
        RequestType(2000, 2, 1000): 3,
        RequestType(16000, 4, 1000, frozenset({0})): 1,
        RequestType(1000, 1, 1000): 4,
    }
    model = FragmentModel(Counter(mix), classes=2)
    for _ in range(40):
        row = [int(v) for v in rng.choice([-1, 0, 100, 250, 600, 1000], size=8)]
        cpu, cls = int(rng.integers(0, 20000)), int(rng.integers(0, 2))
        got = model.frag(rows(row), ints(cpu), ints(cls))[0]
        assert got == pytest.approx(brute_frag(mix, row, cpu, cls))


def test_the_demand_holds_a_whole_node_pod_of_each_node_shape() -> None:
    # two 8-GPU shapes (the 128-CPU one in two classes, counted once), a 1-GPU node without a
    # CPU figure (its pod asks the capped CPU), and a node without GPUs (no pod)
    cpu = ints(128000, 128000, 96000, 1 << 62, 64000)
    gpus = ints(8, 8, 8, 1, 0)
    reach = Reach.of(ints(0, 1, 0, 0, 0), cpu, gpus, gpus.astype(np.float64) * 1000)
    assert whole_node_prior(reach) == {
        RequestType(128000, 8, 1000): PRIOR_PODS,
        RequestType(96000, 8, 1000): PRIOR_PODS,
        RequestType(PRIOR_CPU_CAP, 1, 1000): PRIOR_PODS,
    }
    small = RequestType(11000, 1, 1000)
    # the model weighs them beside what was seen; the cache key stays the demand seen
    key, model = model_of({small: 40}, 2, None, reach)
    assert key == ((small, 40),)
    assert model.cpu_desc.tolist() == [PRIOR_CPU_CAP, 128000, 96000, 11000]
    # without capacity by node shape there is no shape to weigh
    assert model_of({small: 40}, 2, None)[1].cpu_desc.tolist() == [11000]


def test_scores_per_state_expand_to_the_scores_per_node() -> None:
    """`score_states` scores each distinct (free per GPU, CPU, class) state once; each node's
    state (`inverse`) gives back exactly what `score` gives per node, and one node alone is
    scored as itself."""
    mix = Counter({RequestType(4000, 1, 300): 3, RequestType(2000, 2, 1000): 1})
    model = FragmentModel(mix, classes=2)
    base = [1000] * 4 + [-1] * 4
    used = [700, 1000, 1000, 0] + [-1] * 4
    nodes = rows(base, used, base, used, used, base)
    cpu, cls = ints(16000, 16000, 16000, 16000, 24000, 16000), ints(0, 0, 1, 0, 0, 0)
    for cpu_req, n, m in ((4000, 1, 300), (2000, 2, 1000)):
        first, inverse, score, choice = model.score_states(nodes, cpu, cls, cpu_req, n, m)
        assert len(score) == 4  # base/0, used/0, base/1, used with more CPU
        assert (nodes[first][inverse] == nodes).all() and (cpu[first][inverse] == cpu).all()
        per_node, per_node_choice = model.score(nodes, cpu, cls, cpu_req, n, m)
        assert (score[inverse] == per_node).all()
        if choice is not None:
            assert per_node_choice is not None and (choice[inverse] == per_node_choice).all()
        one = model.score_states(nodes[1:2], cpu[1:2], cls[1:2], cpu_req, n, m)
        alone, _ = model._score(nodes[1:2], cpu[1:2], cls[1:2], cpu_req, n, m)
        assert list(one[0]) == [0] and list(one[1]) == [0] and (one[2] == alone).all()


def test_a_score_is_the_stranded_capacity_it_spares_plus_the_best_fit_written_out() -> None:
    """Exactly, not nearly: the best-fit term only breaks ties, so a mistake in it shows only
    here. Whole GPUs (the node loses n of them and the CPU) and CPU alone."""
    mix = Counter({RequestType(4000, 1, 1000): 3, RequestType(2000, 2, 1000): 1})
    model = FragmentModel(mix, classes=1)
    nodes = rows([1000] * 4 + [-1] * 4, [1000, 1000, 0, 300] + [-1] * 4, [1000] * 8)
    cpu, cls = ints(16000, 9000, 64000), ints(0, 0, 0)
    for cpu_req, n in ((4000, 1), (2000, 2), (1000, 0)):
        score, _ = model._score(nodes, cpu, cls, cpu_req, n, 1000)
        after = take_whole(nodes, n) if n else nodes
        spared = model.stranded(nodes, cpu, cls) - model.stranded(after, cpu - cpu_req, cls)
        fit = best_fit(nodes, cpu, cpu_req, n * 1000)
        assert (score == spared + BEST_FIT_WEIGHT * fit).all(), (cpu_req, n)
