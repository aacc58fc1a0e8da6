"""The webhook's never-fits is a certain refusal: judged on the labels the policy decides
(`core.cluster.decided_labels`), never on the synthetic nodes' lack of the cluster's own labels
(hostname, zone, an administrator's). The scheduler judges the same pods on the real nodes."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucarve.config.policy_build import load_policy
from gpucarve.core.cluster import build_cluster, decided_labels
from gpucarve.core.snapshot import Snapshot
from gpucarve.core.vocabulary import MODE_LABEL, POOL_LABEL
from gpucarve.core.workload import LabelRequirement, Operator, Workload
from gpucarve.engine.admit import never_fits
from gpucarve.engine.memo import AcrossCycles
from gpucarve.engine.state import CycleState
from gpucarve.engine.working import Working
from gpucarve.webhook.admission import _as_scheduled, certain_part, pod_problems
from tests.paths import BUILTIN

POLICY = load_policy(BUILTIN / "three-teams.yaml").policy


def _pod(selector: dict[str, str] | None = None, affinity: Any = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
    }
    if selector is not None:
        spec["nodeSelector"] = selector
    if affinity is not None:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": affinity}}}  # fmt: skip
    return {"metadata": {"namespace": "research", "name": "p"}, "spec": spec}


def _codes(pod: dict[str, Any]) -> list[str]:
    return [p.code for p in pod_problems(POLICY, pod)]


def test_selectors_on_the_clusters_own_labels_are_admitted() -> None:
    for selector in (
        {"kubernetes.io/hostname": "gpu-node-7"},
        {"topology.kubernetes.io/zone": "eu-west-1a"},
        {"example.com/team-reserved": "yes", "kubernetes.io/hostname": "x"},
    ):
        assert _codes(_pod(selector)) == [], selector
    affinity = [{"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["a", "b"]}]}]  # fmt: skip
    assert _codes(_pod(affinity=affinity)) == []


def test_a_selector_on_a_label_the_policy_decides_is_still_refused_with_that_label() -> None:
    (p,) = pod_problems(
        POLICY,
        _pod({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM4", "kubernetes.io/hostname": "x"}),
    )
    assert p.code == "can-never-fit"
    assert "nvidia.com/gpu.product" in p.message and "hostname" not in p.message
    # a pool no queue of the namespace can use, named by the pool label
    (p,) = pod_problems(POLICY, _pod({POOL_LABEL: "no-such-pool"}))
    assert p.code == "can-never-fit"


def test_every_name_a_node_of_the_pool_may_publish_is_accepted() -> None:
    h100 = next(p for p in POLICY.pools if p.model.id.startswith("H100"))
    names = sorted(v for v in decided_labels(h100)["nvidia.com/gpu.product"] if v is not None)
    assert len(names) > 1
    for name in names:  # the synthetic node carries one of them; the others are as real
        assert _codes(_pod({"nvidia.com/gpu.product": name})) == [], name


def test_the_pool_label_is_certain_only_as_far_as_the_pools_node_labels_make_it(
    tmp_path: Path,
) -> None:
    dne = [{"matchExpressions": [{"key": POOL_LABEL, "operator": "DoesNotExist"}]}]
    # the example's nodes join their pool by carrying gpucarve.io/pool itself
    assert _codes(_pod(affinity=dne)) == ["can-never-fit"]
    doc = yaml.safe_load((BUILTIN / "three-teams.yaml").read_text())
    for pool in doc["pools"]:
        pool["nodeLabels"] = {"example.com/pool": pool["name"]}
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(doc))
    other = load_policy(path).policy
    assert other is not None
    # a node may join by another label and carry no pool label at all
    assert [p.code for p in pod_problems(other, _pod(affinity=dne))] == []


# ---------------------------------------------------------------- the property
KEYS = ("kubernetes.io/hostname", "topology.kubernetes.io/zone", "example.com/rack",
        "nvidia.com/gpu.product", POOL_LABEL, MODE_LABEL, "nvidia.com/gpu.count")  # fmt: skip
VALUES = ("a", "b", "8", "exclusive", "mig", "NVIDIA-H100-80GB-HBM3", "H100-SXM5-80GB",
          "A100-80GB", "training", "production", "NVIDIA-A100-SXM4-80GB")  # fmt: skip


@st.composite
def _cluster_labels(draw: st.DrawFn) -> list[dict[str, str]]:
    """Labels of each policy node as a real cluster could have them: the decided ones within
    their domains, the others anything."""
    cluster = build_cluster(POLICY)
    pools = {p.name: p for p in POLICY.pools}
    out = []
    for node in cluster.nodes:
        labels = dict(node.labels)
        for key, values in sorted(decided_labels(pools[node.pool]).items()):
            v = draw(st.sampled_from(sorted(values, key=lambda x: (x is None, x or ""))))
            if v is None:
                labels.pop(key, None)
            else:
                labels[key] = v
        for key in KEYS[:3]:
            v = draw(st.sampled_from((None, *VALUES[:2])))
            if v is not None:
                labels[key] = v
        out.append(labels)
    return out


_req = st.builds(
    LabelRequirement,
    st.sampled_from(KEYS),
    st.sampled_from(list(Operator)),
    st.lists(st.sampled_from(VALUES), min_size=1, max_size=2).map(tuple),
)


def _on(labels: list[dict[str, str]], w: Workload) -> bool:
    """Whether the engine, on a cluster whose nodes carry `labels`, finds `w` may fit."""
    cluster = build_cluster(POLICY)
    nodes = tuple(
        dataclasses.replace(n, labels=tuple(sorted(have.items())))
        for n, have in zip(cluster.nodes, labels, strict=True)
    )
    snap = Snapshot(POLICY, dataclasses.replace(cluster, nodes=nodes), (), ())
    return not never_fits(CycleState(snap, 0, Working(snap), AcrossCycles()), w)


@settings(max_examples=150, deadline=None)
@given(
    labels=_cluster_labels(),
    selector=st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=2),
    terms=st.lists(st.lists(_req, min_size=1, max_size=2), max_size=2),
)
def test_never_refuses_what_some_cluster_of_the_policy_would_place(
    labels: list[dict[str, str]], selector: dict[str, str], terms: list[list[LabelRequirement]]
) -> None:
    pod = _pod(selector)
    w = _as_scheduled(POLICY, pod).workload
    assert w is not None
    ps = dataclasses.replace(w.pod_sets[0], affinity=tuple(tuple(t) for t in terms))
    w = dataclasses.replace(w, pod_sets=(ps,))
    snap = Snapshot(POLICY, build_cluster(POLICY), (), ())
    refused = bool(
        never_fits(CycleState(snap, 0, Working(snap), AcrossCycles()), certain_part(POLICY, w))
    )
    if refused:
        assert not _on(labels, w), "the webhook refused what this cluster would place"
