from __future__ import annotations

import contextlib
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucarve.config.policy_build import load_policy
from gpucarve.core.cluster import AllocationError, ClusterState, build_cluster
from gpucarve.core.policy import SliceKind
from tests.paths import BUILTIN


@pytest.fixture(scope="module")
def state() -> ClusterState:
    return build_cluster(load_policy(BUILTIN / "three-teams.yaml").policy)


def test_nodes_gpus_and_slices(state: ClusterState) -> None:
    assert len(state.nodes) == 4 + 8 + 6
    assert sum(len(n.gpus) for n in state.nodes) == 32 + 16 + 6
    kinds = Counter(s.kind for s in state.slices.values())
    assert kinds == {SliceKind.WHOLE: 32, SliceKind.MIG: 16 * 4, SliceKind.TIME_SLICE: 48}
    flavors = Counter(s.flavor for s in state.slices.values())
    assert flavors["a100-mig-3g.40gb"] == 16 and flavors["a100-mig-1g.10gb"] == 32
    assert state.invariant_violations() == []


def test_slice_ids_and_units(state: ClusterState) -> None:
    s = state.slices["production-0/gpu1/3g.40gb@4"]
    assert (s.kind, s.profile, s.start, s.compute_milli, s.memory_mib) == (
        SliceKind.MIG,
        "3g.40gb",
        4,
        428,
        40192,
    )
    r = state.slices["dev-5/gpu0/r7"]
    assert (r.kind, r.replica, r.compute_milli) == (SliceKind.TIME_SLICE, 7, 125)
    whole = state.slices["training-3/gpu7"]
    assert (whole.compute_milli, whole.memory_mib) == (1000, 81559)


def test_nodes_carry_gfd_and_topology_labels(state: ClusterState) -> None:
    n = state.node("training-3")
    assert n.label("nvidia.com/gpu.product") == "NVIDIA-H100-80GB-HBM3"
    assert n.label("nvidia.com/gpu.count") == "8"
    assert n.label("gpucarve.io/rack") == "training-rack1"
    assert n.label("nvidia.com/gpu.clique") == "training-nvl3"
    assert state.node("dev-0").label("nvidia.com/gpu.sharing-strategy") == "time-slicing"
    assert state.node("production-0").label("nvidia.com/mig.strategy") == "mixed"


def test_allocate_is_immutable_and_refuses_double_allocation(state: ClusterState) -> None:
    s1 = state.allocate("training-0/gpu0", "job-a")
    assert "training-0/gpu0" not in state.allocations
    assert s1.allocations["training-0/gpu0"].owner == "job-a"
    with pytest.raises(AllocationError, match="already held by job-a"):
        s1.allocate("training-0/gpu0", "job-b")
    with pytest.raises(AllocationError, match="no slice"):
        s1.allocate("training-0/gpu99", "job-b")
    assert s1.release("job-a").allocations == {}


def test_replicas_cannot_oversubscribe_gpu_memory(state: ClusterState) -> None:
    s = state.allocate("dev-0/gpu0/r0", "nb-1", memory_mib=40_000)
    with pytest.raises(AllocationError, match="would promise"):
        s.allocate("dev-0/gpu0/r1", "nb-2", memory_mib=10_000)
    s = s.allocate("dev-0/gpu0/r1", "nb-2", memory_mib=5_000)
    assert s.invariant_violations() == []


def test_mig_instance_cannot_give_more_than_its_memory(state: ClusterState) -> None:
    with pytest.raises(AllocationError, match="MiB"):
        state.allocate("production-0/gpu0/1g.10gb@0", "x", memory_mib=20_000)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 143), st.integers(0, 9), st.integers(0, 20_000)), max_size=60)
)
def test_random_allocations_keep_invariants(
    state: ClusterState, ops: list[tuple[int, int, int]]
) -> None:
    ids = sorted(state.slices)
    s = state
    for i, owner, mem in ops:
        sid = ids[i % len(ids)]
        with contextlib.suppress(AllocationError):
            s = s.allocate(sid, f"w{owner}", memory_mib=mem)
        if owner == 0:
            s = s.release("w1")
        assert s.invariant_violations() == []
    held = Counter(a.slice_id for a in s.allocations.values())
    assert all(c == 1 for c in held.values())
