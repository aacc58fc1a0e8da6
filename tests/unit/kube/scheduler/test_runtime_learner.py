"""The scheduler learns runs only from workloads whose pods all Succeeded: evicted, deleted or
failed work did not finish."""

from __future__ import annotations

from gpucarve.core.snapshot import Snapshot
from gpucarve.kube.scheduler.runtimes import RuntimeLearner
from tests.engine.builders import cycle, policy, pool, queue, snapshot, workload

P = policy(
    pools=[pool("train", "H100-SXM5-80GB", 1, 8)],
    queues=[queue("r", {"h100-full": {"nominal": 8}})],
)


def _running(names: list[str]) -> Snapshot:
    _, s = cycle(snapshot(P, [workload(P, n, "r", gpus=2) for n in names]), 100)
    return s


def test_only_runs_whose_pods_all_succeeded_are_learned() -> None:
    learner = RuntimeLearner()
    s = _running(["a", "b", "c", "d"])
    pods = {rw.workload.id: (f"{rw.workload.id}-pod",) for rw in s.running}
    learner.observe(s, pods, lambda p: "Running", 100)
    phases = {"r/a-pod": "Succeeded", "r/b-pod": "Succeeded", "r/c-pod": "Failed"}
    empty = Snapshot(P, s.cluster)
    learner.observe(empty, {}, phases.get, 400)  # d's pod is gone: deleted, not a run
    kind = workload(P, "next", "r", gpus=2)
    assert len(learner.book) == 2
    assert learner.book.learned(kind) is None  # two runs: one short of an estimate
    learner.observe(_running(["e"]), {"r/e": ("r/e-pod",)}, lambda p: "Running", 500)
    learner.observe(empty, {}, lambda p: "Succeeded", 400)
    assert learner.book.learned(kind) == 300


def test_a_finished_workload_is_exported_with_its_completion_and_run_time() -> None:
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from gpucarve.metrics.scheduler_metrics import SchedulerMetrics

    m = SchedulerMetrics()
    learner = RuntimeLearner(m.observe_finished)
    s = _running(["a"])  # submitted at 0, started at 100
    learner.observe(s, {"r/a": ("r/a-pod",)}, lambda p: "Running", 100)
    learner.observe(Snapshot(P, s.cluster), {}, lambda p: "Succeeded", 400)
    text = generate_latest(m.registry).decode()
    got = {
        (x.name, x.labels.get("queue")): x.value
        for f in text_string_to_metric_families(text)
        for x in f.samples
    }
    assert got[("gpucarve_completion_seconds_sum", "r")] == 400
    assert got[("gpucarve_runtime_seconds_sum", "r")] == 300
    assert got[("gpucarve_slowdown_sum", "r")] == 400 / 300
    buckets = {
        x.labels["le"]: x.value
        for f in text_string_to_metric_families(text)
        for x in f.samples
        if x.name == "gpucarve_slowdown_bucket"
    }
    assert (buckets["1.25"], buckets["1.5"]) == (0, 1)  # 400 s over 300 s: 1.33


def test_the_candidates_the_view_names_stand_for_the_comparison() -> None:
    """Given the workloads that may have ended (`maybe_gone`), the learner looks at those only:
    all of them named, it learns what the comparison of the two cycles learns; one left out
    (never so by the view, which names a superset) is not looked at."""
    books = []
    for hint in (None, ["r/a", "r/b", "r/x"], ["r/b"]):
        learner = RuntimeLearner()
        s = _running(["a", "b"])
        pods = {rw.workload.id: (f"{rw.workload.id}-pod",) for rw in s.running}
        learner.observe(s, pods, lambda p: "Running", 100)
        learner.observe(Snapshot(P, s.cluster), {}, lambda p: "Succeeded", 400, hint)
        books.append(len(learner.book))
    assert books == [2, 2, 1]
