"""Required node affinity as Kubernetes defines it: Gt and Lt, and nodeSelectorTerms ORed;
from the pod through the view into the engine's placement."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from gpucarve.config.policy_build import load_policy
from gpucarve.core.cluster import build_cluster
from gpucarve.core.snapshot import Snapshot
from gpucarve.core.workload import LabelRequirement, Operator
from gpucarve.engine import run_cycle
from gpucarve.kube.view.pods.pods import pending_workloads
from tests.paths import BUILTIN

POLICY = load_policy(BUILTIN / "three-teams.yaml").policy
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def test_gt_and_lt_compare_whole_numbers() -> None:
    gt = LabelRequirement("nvidia.com/gpu.memory", Operator.GT, ("40000",))
    lt = LabelRequirement("nvidia.com/gpu.memory", Operator.LT, ("40000",))
    assert gt.matches({"nvidia.com/gpu.memory": "81559"})
    assert not gt.matches({"nvidia.com/gpu.memory": "40000"})
    assert lt.matches({"nvidia.com/gpu.memory": "24576"})
    assert not gt.matches({"nvidia.com/gpu.memory": "lots"}) and not gt.matches({})


def _pod(terms: list[list[dict[str, Any]]], gpus: str = "1") -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "research",
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {
            "schedulerName": "gpucarve",
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": t} for t in terms]}}},
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus}}}],
        },
    }  # fmt: skip


def _placed_on(pod: dict[str, Any]) -> list[str]:
    (group,) = pending_workloads([pod], POLICY, EPOCH)
    assert group.workload is not None, group.problems
    snapshot = Snapshot(POLICY, build_cluster(POLICY), (), (group.workload,))
    result = run_cycle(snapshot, 0)
    return [p.node for a in result.admissions for p in a.pods]


def test_ored_terms_place_where_any_term_holds() -> None:
    nowhere = {"key": "zone", "operator": "In", "values": ["mars"]}
    big = {"key": "nvidia.com/gpu.memory", "operator": "Gt", "values": ["40000"]}
    # the first term matches no node: Kubernetes ORs the terms, so the second decides
    (node,) = _placed_on(_pod([[nowhere], [big]]))
    assert node.startswith("training-")
    assert _placed_on(_pod([[nowhere]])) == []
    # a term's expressions are ANDed
    small = {"key": "nvidia.com/gpu.memory", "operator": "Lt", "values": ["40000"]}
    assert _placed_on(_pod([[big, small]])) == []


def test_a_single_term_reads_as_before_and_bad_expressions_are_refused() -> None:
    (group,) = pending_workloads([_pod([[{"key": "a", "operator": "Exists"}]])], POLICY, EPOCH)
    assert group.workload is not None
    assert group.workload.pod_sets[0].affinity == ((LabelRequirement("a", Operator.EXISTS),),)
    bad = _pod([[{"key": "nvidia.com/gpu.memory", "operator": "Gt", "values": ["40", "50"]}]])
    (group,) = pending_workloads([bad], POLICY, EPOCH)
    assert group.workload is None
    (problem,) = group.problems
    assert problem.code == "bad-affinity" and "exactly one whole number" in problem.message


ZONES = """
apiVersion: gpucarve.io/v1alpha1
kind: Policy
metadata: {name: zones}
pools:
  - {name: a, gpuModel: H100-SXM5-80GB, nodes: 2, gpusPerNode: 8, sharing: exclusive,
     nodeLabels: {zone: a}}
  - {name: b, gpuModel: H100-SXM5-80GB, nodes: 2, gpusPerNode: 8, sharing: exclusive,
     nodeLabels: {zone: b}}
queues:
  - {name: research, namespaces: [research], quota: {h100-full: {nominal: 32}}}
"""


def _preferring(weight_terms: list[tuple[int, str]]) -> Any:
    p = _pod([])
    preferred = [
        {"weight": w, "preference": {"matchExpressions": [
            {"key": "zone", "operator": "In", "values": [zone]}]}}
        for w, zone in weight_terms
    ]  # fmt: skip
    p["spec"]["affinity"] = {
        "nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": preferred}
    }
    return p


def _zone_of(pod: dict[str, Any], scoring: str = "") -> str | None:
    from tests.unit.webhook.test_admission import load_policy_text

    policy = load_policy_text(ZONES + scoring)
    (group,) = pending_workloads([pod], policy, EPOCH)
    assert group.workload is not None, group.problems
    result = run_cycle(Snapshot(policy, build_cluster(policy), (), (group.workload,)), 0)
    nodes = {n.name: n for n in build_cluster(policy).nodes}
    placed = [p.node for a in result.admissions for p in a.pods]
    return dict(nodes[placed[0]].labels)["zone"] if placed else None


@pytest.mark.parametrize(
    "scoring",
    ["", "scheduling: {scoring: {binpack: 1, fragmentation: 0}}\n"],
    ids=["fragmentation-model", "weighted-plugins"],
)
def test_preferred_terms_put_the_pod_where_most_weight_matches(scoring: str) -> None:
    assert _zone_of(_pod([]), scoring) == "a"  # left to itself, placement takes zone a
    assert _zone_of(_preferring([(50, "b")]), scoring) == "b"
    assert _zone_of(_preferring([(90, "a"), (10, "b")]), scoring) == "a"
    assert _zone_of(_preferring([(10, "a"), (90, "b")]), scoring) == "b"
    assert _zone_of(_preferring([(1, "mars")]), scoring) == "a"  # none matches: placed anyway
