"""A pod's node selection narrows and orders the flavors it could run on, in every part of
the cycle: an L4-only pod is no reason for free H100s to sit idle, explain shows only the
quota it could use, and a preference for L4 nodes is not lost to packing on the H100s."""

from __future__ import annotations

import dataclasses

from gpucarve.core.cluster import OUT_OF_SERVICE, RECONFIGURING, Allocation
from gpucarve.core.snapshot import Snapshot
from gpucarve.core.workload import LabelRequirement, Operator, Workload
from gpucarve.engine.decisions import IdleCause
from gpucarve.engine.engine import run_cycle
from gpucarve.engine.explain import explain
from tests.engine.builders import cycle, policy, pool, queue, snapshot, submit, workload

PRODUCT = "nvidia.com/gpu.product"
P = policy(
    pools=[pool("train", "H100-SXM5-80GB", 2, 8), pool("infer", "L4", 1, 2)],
    queues=[queue("r", {"h100-full": {"nominal": 16}, "l4-full": {"nominal": 2}})],
)


def _prefers_l4(w: Workload, weight: int = 50) -> Workload:
    term = (LabelRequirement(PRODUCT, Operator.IN, ("NVIDIA-L4",)),)
    ps = dataclasses.replace(w.pod_sets[0], preferred=((weight, term),))
    return dataclasses.replace(w, pod_sets=(ps,))


def test_an_l4_only_pod_is_no_reason_for_free_h100s_to_sit_idle() -> None:
    busy = workload(P, "l4-busy", "r", gpus=2, node_selector={PRODUCT: "NVIDIA-L4"})
    _, s = cycle(snapshot(P, [busy]))
    waits = workload(P, "l4-more", "r", gpus=1, node_selector={PRODUCT: "NVIDIA-L4"}, submit=5)
    result, _ = cycle(submit(s, waits), 10)
    assert result.admitted_ids() == []
    idle = {i.flavor: i for i in result.idle}
    assert idle["h100-full"].cause is IdleCause.NOTHING_WAITING, idle
    assert idle["h100-full"].workload in (None, "")
    # explain names only the L4 quota: its selection rules the H100 flavor out
    s2 = submit(s, waits)
    e = explain(s2, run_cycle(s2, 10), waits.id)
    assert e is not None
    assert [q.flavor for q in e.quota] == ["l4-full"]
    assert not any("h100" in line for line in e.idle), e.idle


def test_a_pod_that_prefers_l4_nodes_lands_there_while_they_are_free() -> None:
    # seven of a node's H100s are taken: packing would fill its last one
    _, s = cycle(snapshot(P, [workload(P, "h100-seven", "r", gpus=7, node_selector={
        PRODUCT: "NVIDIA-H100-80GB-HBM3"})]))  # fmt: skip
    pref = _prefers_l4(workload(P, "pref", "r", gpus=1, submit=5))
    result, after = cycle(submit(s, pref), 10)
    (admission,) = result.admissions
    assert [p.node for p in admission.pods] == ["infer-0"]
    # once the L4s are full it goes to an H100 after all
    other = _prefers_l4(workload(P, "pref-2", "r", gpus=2, submit=20))
    result, _ = cycle(submit(after, other), 30)
    (admission,) = result.admissions
    assert all(p.node.startswith("train-") for p in admission.pods)


def test_explain_counts_only_the_workloads_that_hold_the_flavor() -> None:
    on_l4 = workload(P, "l4", "r", gpus=2, node_selector={PRODUCT: "NVIDIA-L4"})
    on_h100 = workload(P, "h100", "r", gpus=8, pods=2)
    _, s = cycle(snapshot(P, [on_l4, on_h100]))
    more = workload(P, "more", "r", gpus=8, submit=5)
    s = submit(s, more)
    e = explain(s, run_cycle(s, 10), more.id)
    assert e is not None
    assert any("queue r holds 16 h100-full in 1 running workloads" in h for h in e.hints), e.hints


def _held_by(owner: str) -> Snapshot:
    s = snapshot(P, [])
    held = {
        sid: Allocation(sid, f"{owner}{sl.node}/gpu{sl.gpu}", sl.compute_milli, sl.memory_mib)
        for sid, sl in s.cluster.slices.items()
        if sl.node == "train-0" and sl.gpu in (2, 5)
    }
    return dataclasses.replace(s, cluster=s.cluster.with_allocations(held))


def test_explain_names_the_gpus_out_of_service_when_a_pod_waits_for_room() -> None:
    big = workload(P, "big", "r", gpus=8, pods=2, submit=5)
    s = submit(_held_by(OUT_OF_SERVICE), big)
    e = explain(s, run_cycle(s, 10), big.id)
    assert e is not None and any("free in the cluster" in h for h in e.hints), e.hints
    (line,) = [h for h in e.hints if "out of service" in h]
    assert "2 GPU(s) with h100-full out of service for a fault" in line
    assert "(train-0/gpu2, train-0/gpu5)" in line
    # the same GPUs held by a MIG change in flight are no fault
    s = submit(_held_by(RECONFIGURING), big)
    e = explain(s, run_cycle(s, 10), big.id)
    assert e is not None and any("free in the cluster" in h for h in e.hints), e.hints
    assert not any("out of service" in h for h in e.hints)
