"""Workload documents: the request rules, with the same error quality as the policy."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpucarve.config.policy_build import load_policy
from gpucarve.config.workload_spec import build_workload, build_workloads
from gpucarve.core.problems import InvalidInput
from gpucarve.core.workload import GpuKind
from tests.paths import BUILTIN

POLICY = load_policy(BUILTIN / "three-teams.yaml").policy

BASE: dict[str, Any] = {
    "name": "job",
    "namespace": "research",
    "podSets": [{"count": 2, "resources": {"limits": {"nvidia.com/gpu": 4}}}],
}


def build(**changes: Any) -> tuple[Any, list[tuple[str, str, str]]]:
    doc = copy.deepcopy(BASE)
    for key, value in changes.items():
        if key.startswith("ps_"):
            doc["podSets"][0][key[3:]] = value
        else:
            doc[key] = value
    w, problems = build_workload(doc, POLICY)
    return w, [(p.code, p.location, p.message) for p in problems]


def test_valid_workload_resolves_queue_and_default_priority() -> None:
    w, problems = build()
    assert problems == []
    assert (w.id, w.queue, w.priority_class, w.priority, w.preemptible) == (
        "research/job",
        "research",
        "training",
        1000,
        True,
    )
    assert w.pod_sets[0].gpu.kind is GpuKind.WHOLE and w.pod_sets[0].gpu.count == 4


@pytest.mark.parametrize(
    ("resources", "code"),
    [
        ({"requests": {"nvidia.com/gpu": 2}, "limits": {"nvidia.com/gpu": 4}}, "request-not-limit"),
        ({"requests": {"nvidia.com/gpu": 2}}, "request-without-limit"),
        ({"limits": {"nvidia.com/gpu": "1500m"}}, "bad-quantity"),
        ({"limits": {"nvidia.com/mig-3g.20gb": 1}}, "no-flavor-serves"),
        ({"limits": {"nvidia.com/tpu": 1}}, "unknown-resource"),
        ({"limits": {"nvidia.com/gpu": 1, "nvidia.com/mig-1g.10gb": 1}}, "several-gpu-kinds"),
        ({"limits": {"nvidia.com/gpu": 1}, "requests": {"cpu": "lots"}}, "bad-quantity"),
    ],
)
def test_resource_mistakes(resources: dict[str, Any], code: str) -> None:
    w, problems = build(ps_resources=resources)
    assert w is None
    assert code in [c for c, _, _ in problems], problems


@pytest.mark.parametrize(
    ("annotations", "code"),
    [
        ({"gpucarve.io/gpu-fraction": "1500"}, "bad-fraction"),
        ({"gpucarve.io/gpu-fraction": "0.5"}, "bad-fraction"),
        ({"gpucarve.io/gpu-memory": "999999"}, "gpu-memory-too-large"),
        ({"gpucarve.io/gpu-memory": "-4"}, "bad-gpu-memory"),
    ],
)
def test_fraction_mistakes(annotations: dict[str, str], code: str) -> None:
    w, problems = build(ps_annotations=annotations, ps_resources={})
    assert w is None
    assert code in [c for c, _, _ in problems], problems


FRAC, FRAC_UP = "gpucarve.io/gpu-fraction", "gpucarve.io/gpu-fraction-limit"
MEM, MEM_UP = "gpucarve.io/gpu-memory", "gpucarve.io/gpu-memory-limit"


def test_a_fraction_with_a_limit_is_charged_by_its_request() -> None:
    w, problems = build(ps_annotations={FRAC: "250", FRAC_UP: "500", MEM: "4096",
                                        MEM_UP: "8192"}, ps_resources={})  # fmt: skip
    assert problems == []
    gpu = w.pod_sets[0].gpu
    assert (gpu.milli, gpu.milli_limit, gpu.memory_mib, gpu.memory_limit_mib) == (
        250, 500, 4096, 8192
    )  # fmt: skip
    assert gpu.describe() == "fraction 0.25 GPU (up to 0.5) + 4096 MiB (up to 8192)"
    same, _ = build(ps_annotations={FRAC: "250", FRAC_UP: "250"}, ps_resources={})
    assert same.pod_sets[0].gpu.milli_limit == 0  # a limit equal to the request: no burst


@pytest.mark.parametrize(
    ("annotations", "code", "field"),
    [
        ({FRAC: "500", FRAC_UP: "250"}, "bad-fraction-limit", FRAC_UP),
        ({FRAC: "500", FRAC_UP: "1001"}, "bad-fraction-limit", FRAC_UP),
        ({FRAC: "500", FRAC_UP: "half"}, "bad-fraction-limit", FRAC_UP),
        ({MEM: "4096", MEM_UP: "999999"}, "bad-fraction-limit", MEM_UP),
        ({FRAC: "500", MEM_UP: "8192"}, "bad-fraction-limit", MEM_UP),
        ({FRAC_UP: "500"}, "limit-without-request", None),
    ],
)
def test_fraction_limit_mistakes(annotations: dict[str, str], code: str, field: str | None) -> None:
    w, problems = build(ps_annotations=annotations, ps_resources={})
    assert w is None
    found = [(c, loc) for c, loc, _ in problems]
    where = "podSets[0].annotations" + (f".{field}" if field else "")
    assert (code, where) in found, problems


def test_fraction_cannot_combine_with_gpu_resource() -> None:
    _, problems = build(ps_annotations={"gpucarve.io/gpu-fraction": "500"})
    assert ("fraction-with-gpu", "podSets[0].annotations") in [(c, loc) for c, loc, _ in problems]


def test_fraction_and_mig_and_me_resources_parse() -> None:
    w, _ = build(
        ps_annotations={"gpucarve.io/gpu-fraction": "300", "gpucarve.io/gpu-memory": "20000"},
        ps_resources={},
    )
    gpu = w.pod_sets[0].gpu
    assert (gpu.kind, gpu.milli, gpu.memory_mib) == (GpuKind.FRACTION, 300, 20000)
    w, problems = build(
        namespace="production", ps_resources={"limits": {"nvidia.com/mig-3g.40gb": 1}}
    )
    assert problems == [] and w.pod_sets[0].gpu.profile == "3g.40gb"


def test_queue_from_labels_and_namespace() -> None:
    w, _ = build(namespace="notebooks", labels={"kueue.x-k8s.io/queue-name": "data-science"})
    assert w.queue == "data-science"
    # a tenant's label cannot charge its work to another team's queue
    for ns in ("research", "anywhere"):
        w, problems = build(namespace=ns, labels={"gpucarve.io/queue": "production"})
        assert w is None
        code, where, message = problems[0]
        assert code == "queue-not-for-namespace" and where.endswith("labels.gpucarve.io/queue")
        assert f"namespace {ns!r} may not use queue 'production'" in message
    # a trace's `queue:` field is the simulator's own routing, not a tenant's claim
    w, _ = build(namespace="anywhere", queue="data-science")
    assert w is not None and w.queue == "data-science"
    w, _ = build(namespace="notebooks")
    assert w.queue == "data-science"
    _, problems = build(namespace="anywhere")
    assert problems[0][0] == "no-queue"
    _, problems = build(queue="nope")
    assert problems[0][:2] == ("unknown-queue", "queue")


def test_priority_class_rules() -> None:
    _, problems = build(priorityClass="production-critical")
    assert problems[0][0] == "priority-class-not-allowed"
    assert "queue research does not allow priority class 'production-critical'" in problems[0][2]
    _, problems = build(priorityClass="urgent")
    assert problems[0][0] == "unknown-priority-class"


def test_more_than_max_per_workload() -> None:
    _, problems = build(
        namespace="production",
        podSets=[{"count": 5, "resources": {"limits": {"nvidia.com/mig-3g.40gb": 1}}}],
    )
    assert problems[0][:2] == ("exceeds-max-per-workload", "podSets[0].count")
    assert "a100-mig-3g.40gb 5 > 4" in problems[0][2]
    w, problems = build(
        namespace="production",
        podSets=[
            {"count": 5, "minCount": 4, "resources": {"limits": {"nvidia.com/mig-3g.40gb": 1}}}
        ],
    )
    assert problems == [] and w.pod_sets[0].min_count == 4


def test_min_count_above_count() -> None:
    _, problems = build(ps_minCount=3)
    assert ("out-of-range", "podSets[0].minCount") in [(c, loc) for c, loc, _ in problems]


def test_structural_errors_have_paths() -> None:
    _, problems = build(podSets=[{"count": "two"}])
    assert ("wrong-type", "podSets[0].count") in [(c, loc) for c, loc, _ in problems]
    _, problems = build(topology="zone")
    assert problems[0][:2] == ("bad-value", "topology")


def test_build_workloads_reports_every_bad_item_and_duplicates() -> None:
    items = [
        copy.deepcopy(BASE),
        copy.deepcopy(BASE),
        {**copy.deepcopy(BASE), "name": "x", "queue": "nope"},
    ]
    with pytest.raises(InvalidInput) as exc:
        build_workloads(items, POLICY, "trace.yaml")
    codes = {(p.code, p.location) for p in exc.value.problems}
    assert ("duplicate-workload", "[1].name") in codes
    assert ("unknown-queue", "[2].queue") in codes
