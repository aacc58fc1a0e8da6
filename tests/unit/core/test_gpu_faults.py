"""Which faults a pool takes out of service: at most its budget, in the order they were seen,
fatal faults always (and counted); the same answer whatever order the faults come in."""

from __future__ import annotations

import random

from gpucarve.core.gpu_faults import CLASSES, Budget, Fault, class_of_xid, out_of_service


def fault(gpu: str, cls: str = "memory-uncorrected", since: int = 0) -> Fault:
    return Fault(gpu, "why", cls, since)


def test_the_budget_counts_gpus_or_a_share_of_the_pool_and_never_falls_under_one() -> None:
    assert Budget(gpus=None, percent=50).of(16) == 8
    assert Budget(gpus=None, percent=25).of(3) == 1  # 0.75 rounds down, but one may go
    assert Budget(gpus=4, percent=None).of(100) == 4
    assert Budget(gpus=4, percent=10).of(20) == 2  # the smaller of the two


def test_faults_past_the_budget_stay_in_service_in_the_order_seen() -> None:
    faults = {g: fault(g, since=t) for g, t in [("n0/gpu0", 30), ("n1/gpu0", 10), ("n2/gpu0", 20)]}
    pool = dict.fromkeys(faults, "p")
    out, held = out_of_service(faults, pool, {"p": 4}, CLASSES, Budget(gpus=2, percent=None))
    assert sorted(out) == ["n1/gpu0", "n2/gpu0"] and list(held) == ["n0/gpu0"]


def test_a_fatal_fault_is_out_whatever_the_budget_and_counts() -> None:
    faults = {
        "n0/gpu0": fault("n0/gpu0", since=1),
        "n1/gpu0": fault("n1/gpu0", "fallen-off-bus", since=5),
        "n2/gpu0": fault("n2/gpu0", "device-lost", since=6),
    }
    pool = dict.fromkeys(faults, "p")
    out, held = out_of_service(faults, pool, {"p": 8}, CLASSES, Budget(gpus=1, percent=None))
    assert sorted(out) == ["n1/gpu0", "n2/gpu0"] and list(held) == ["n0/gpu0"]


def test_pools_have_their_own_budgets_and_reported_classes_take_nothing_out() -> None:
    faults = {
        "a/gpu0": fault("a/gpu0"),
        "b/gpu0": fault("b/gpu0"),
        "b/gpu1": fault("b/gpu1", "throttled"),
    }
    pool = {"a/gpu0": "x", "b/gpu0": "y", "b/gpu1": "y"}
    out, held = out_of_service(faults, pool, {"x": 2, "y": 2}, CLASSES, Budget(1, None))
    assert sorted(out) == ["a/gpu0", "b/gpu0"] and held == {}


def test_the_answer_does_not_depend_on_the_order_faults_arrive_in() -> None:
    rng = random.Random(7)
    faults = [fault(f"n{i}/gpu{j}", rng.choice(["nvlink", "thermal", "device-lost"]),
                    rng.randrange(5)) for i in range(6) for j in range(2)]  # fmt: skip
    pool = {f.gpu: f"p{int(f.gpu[1]) % 2}" for f in faults}
    answers = set()
    for _ in range(20):
        rng.shuffle(faults)
        out, held = out_of_service(
            {f.gpu: f for f in faults}, pool, {"p0": 6, "p1": 6}, CLASSES, Budget(2, None)
        )
        answers.add((tuple(out), tuple(held)))
    assert len(answers) == 1


def test_xids_map_to_nvidias_classes_and_an_unlisted_one_is_other() -> None:
    assert class_of_xid(79, CLASSES).name == "fallen-off-bus"
    assert class_of_xid(63, CLASSES).name == "remap-pending"
    assert class_of_xid(31, CLASSES).name == "other-xid"
