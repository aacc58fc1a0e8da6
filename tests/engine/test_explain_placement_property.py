"""Explain's placement hint is placement's own arithmetic: over generated clusters (one-GPU
work spread over two to five 8-GPU nodes, a pod asking for more GPUs on one node than any node
has free), whenever explain says
"it runs once N more are free on one node", freeing exactly N on the node with the most free
gets the pod placed in the next cycle, and N - 1 does not. The first-day report's case (a
7-GPU pod whose best node has 4 free, told "0 more") is the example the search starts from."""

from __future__ import annotations

import re

from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpucarve.core.policy import Policy
from gpucarve.core.snapshot import Snapshot
from gpucarve.engine import finish, run_cycle
from gpucarve.engine.decisions import Stage
from gpucarve.engine.explain import explain
from tests.engine.builders import cycle, policy, pool, queue, snapshot, submit, workload

HINT = re.compile(r"at most (\d+) on one node; its largest pod needs (\d+) on one node: it "
                  r"runs once (\d+) more are free on one node")  # fmt: skip
PER_NODE = 8


def _policy(nodes: int) -> Policy:
    return policy(
        pools=[pool("train", "H100-SXM5-80GB", nodes, PER_NODE)],
        queues=[queue("research", {"h100-full": {"nominal": nodes * PER_NODE}})],
        # one-GPU work spread over the nodes leaves each partly free: room no node has whole
        scheduling={"preemption": False, "scoring": {"spread": 1, "binpack": 0,
                                                     "fragmentation": 0}},
    )  # fmt: skip


def _running(p: Policy, small: int) -> Snapshot | None:
    s = snapshot(p, [])
    for i in range(small):
        s = submit(s, workload(p, f"w{i}", "research", gpus=1, submit=i))
    _, s = cycle(s, 0)
    return s if len(s.running) == small else None


def _placed(s: Snapshot, asking: int) -> tuple[Stage | None, str]:
    """The stage the asking pod waits at (None: placed), and explain's hints."""
    s = submit(s, workload(_policy_of(s), "ask", "research", gpus=asking, submit=100))
    result = run_cycle(s, 100)
    reason = result.pending_reason("research/ask")
    e = explain(s, result, "research/ask")
    hints = "\n".join(e.hints) if e is not None else ""
    return (None if reason is None else reason.stage), hints


def _policy_of(s: Snapshot) -> Policy:
    return s.policy


def _freed_on(s: Snapshot, node: str, n: int) -> Snapshot:
    """`s` once `n` of the one-GPU workloads on `node` have finished."""
    there = sorted(rw.workload.id for rw in s.running if rw.pods[0].node == node)
    assert len(there) >= n
    return finish(s, *there[:n])


def _most_free(s: Snapshot) -> tuple[str, int]:
    used: dict[str, int] = {n.name: 0 for n in s.cluster.nodes}
    for rw in s.running:
        used[rw.pods[0].node] += 1
    node = min(used, key=lambda n: (used[n], n))
    return node, PER_NODE - used[node]


@settings(max_examples=400, deadline=None, derandomize=True, database=None)
@given(nodes=st.integers(2, 5), small=st.integers(0, 5 * PER_NODE), asking=st.integers(1, 8))
@example(nodes=3, small=12, asking=7)  # 4 free on each node, 7 asked: the report's "0 more"
def test_freeing_what_explain_says_places_the_pod_and_one_less_does_not(
    nodes: int, small: int, asking: int
) -> None:
    if small > nodes * PER_NODE:
        return
    p = _policy(nodes)
    s = _running(p, small)
    if s is None:
        return
    waits, hints = _placed(s, asking)
    said = HINT.search(hints)
    if waits is not Stage.PLACEMENT:
        # placed, or over the queue's quota (freeing only lowers its use: not this property)
        assert said is None, hints
        return
    assert said is not None, hints
    most, needs, more = (int(g) for g in said.groups())
    node, free = _most_free(s)
    assert (most, needs) == (free, asking), hints
    assert more >= 1, hints
    after, _ = _placed(_freed_on(s, node, more), asking)
    assert after is None, f"freed {more} on {node} as explain said, still waits:\n{hints}"
    before, _ = _placed(_freed_on(s, node, more - 1), asking)
    assert before is Stage.PLACEMENT, f"freed {more - 1}, one less than said, placed:\n{hints}"
