"""Owner kinds are one registry: the scheduler's informers, `explain`'s reads and the chart's
RBAC all follow it, and a new kind is one entry."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from gpucarve.core.policy import TopologyKeys
from gpucarve.core.problems import Problem
from gpucarve.kube.view.pods.group_spec import GroupSpec
from gpucarve.kube.view.pods.owner_kinds import (
    OWNER_KINDS,
    OwnerKind,
    Watched,
    all_specs,
    group_of,
    rbac_rules,
    watched,
)
from gpucarve.kube.view.pods.owners import positive_int
from gpucarve.kube.view.pods.pod_groups import resolve_topology

CHART_RBAC = Path(__file__).resolve().parents[4] / "deploy/helm/gpucarve/templates/rbac.yaml"
# the scheduler's own informers, not owners' (the DRA ones run where the policy has DRA pools),
# and the DeviceTaintRules it wrote, listed once when it starts (kube/scheduler/device_taints.py)
INFORMED_ALWAYS = {
    ("", "pods"),
    ("", "nodes"),
    ("resource.k8s.io", "resourceslices"),
    ("resource.k8s.io", "resourceclaims"),
    ("resource.k8s.io", "devicetaintrules"),
}


def chart_read_rules() -> set[tuple[str, str, str]]:
    """(group, resource, verb) the chart's ClusterRole grants for reading (list, watch)."""
    text = CHART_RBAC.read_text()
    first = text.split("\n---\n")[0]
    # the template's only directives are in metadata: drop those lines, parse the rules
    plain = "\n".join(line for line in first.splitlines() if "{{" not in line)
    role = yaml.safe_load(plain)
    assert role["kind"] == "ClusterRole"
    out = set()
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    if verb in ("list", "watch") and (group, resource) not in INFORMED_ALWAYS:
                        out.add((group, resource, verb))
    return out


def test_the_charts_cluster_role_reads_exactly_the_registrys_objects() -> None:
    assert chart_read_rules() == rbac_rules()


def test_every_watched_kind_reads_its_objects_into_specs() -> None:
    for kind in OWNER_KINDS:
        assert (kind.watch is None) == (kind.specs is None), kind.name
    paths = {w.path for _, w in watched()}
    assert paths == {
        "/apis/gpucarve.io/v1alpha1/podgroups",
        "/apis/scheduling.x-k8s.io/v1alpha1/podgroups",
        "/apis/scheduling.k8s.io/v1beta1/podgroups",
        "/apis/batch/v1/jobs",
    }


def test_an_earlier_kind_wins_a_gang_both_name() -> None:
    pg = {"metadata": {"namespace": "a", "name": "job-t"}, "spec": {"minMember": 3}}
    job = {
        "metadata": {"namespace": "a", "name": "t"},
        "spec": {"parallelism": 4, "completions": 4},
    }
    specs = all_specs({"PodGroup": [pg], "Job": [job]})
    assert specs[("a", "job-t")].min_member == 3
    # a kind that is not served (missing from the objects) gives nothing
    assert all_specs({"Job": [job]})[("a", "job-t")].min_member == 4


# A kind the project does not ship, added the way a contributor would: one entry.
VOLCANO_LABEL = "volcano.sh/job-name"


def _volcano_gang(labels: Mapping[str, Any], *_: Mapping[str, Any]) -> tuple[str, None] | None:
    name = labels.get(VOLCANO_LABEL)
    return (f"vcjob-{name}", None) if name else None


def _volcano_specs(objs: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], GroupSpec]:
    out = {}
    for obj in objs:
        meta = obj["metadata"]
        size = positive_int((obj.get("spec") or {}).get("minAvailable"))
        if size is not None:
            out[(meta["namespace"], f"vcjob-{meta['name']}")] = GroupSpec(size)
    return out


VOLCANO = OwnerKind(
    "Volcano Job",
    _volcano_gang,
    watch=Watched("batch.volcano.sh", "v1alpha1", "jobs"),
    specs=_volcano_specs,
)


def test_a_new_owner_kind_is_one_registry_entry() -> None:
    kinds = (*OWNER_KINDS, VOLCANO)
    pod = {"labels": {VOLCANO_LABEL: "train"}, "annotations": {}}
    assert group_of(pod) is None  # unknown to the shipped registry
    assert group_of(pod, kinds) == ("vcjob-train", None)
    job = {"metadata": {"namespace": "ml", "name": "train"}, "spec": {"minAvailable": 8}}
    assert all_specs({"Volcano Job": [job]}, kinds) == {("ml", "vcjob-train"): GroupSpec(8)}
    assert ("batch.volcano.sh", "jobs", "watch") in rbac_rules(kinds)
    assert ("/apis/batch.volcano.sh/v1alpha1/jobs") in {w.path for _, w in watched(kinds)}
    # the opt-out annotation holds for it too
    opted = {"labels": pod["labels"], "annotations": {"gpucarve.io/gang": "false"}}
    assert group_of(opted, kinds) is None


# ---------------------------------------------------------------- Kubernetes' Workload API
def _upstream(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"namespace": "ml", "name": name}, "spec": spec}


def test_a_pod_names_its_workload_api_pod_group_in_its_spec() -> None:
    meta = {"labels": {}, "annotations": {"gpucarve.io/gang": "false"}}
    spec = {"schedulingGroup": {"podGroupName": "train-0"}}
    # naming the group is an explicit choice: the opt-out annotation does not undo it
    assert group_of(meta, spec=spec) == ("train-0", None)
    assert group_of(meta, spec={"schedulingGroup": {}}) is None
    assert group_of(meta) is None
    # a gpucarve pod group label, earlier in the registry, names the gang first
    labelled = {"labels": {"gpucarve.io/pod-group": "mine"}, "annotations": {}}
    assert group_of(labelled, spec=spec) == ("mine", None)


def test_workload_api_pod_groups_give_the_gang_its_minimum_priority_and_topology() -> None:
    gang = {
        "schedulingPolicy": {"gang": {"minCount": 4}},
        "priorityClassName": "training",
        "schedulingConstraints": {
            "topology": [{"key": "gpucarve.io/rack"}, {"key": "kubernetes.io/hostname"}]
        },
    }
    specs = all_specs(
        {
            "Workload API PodGroup": [
                _upstream("gang", gang),
                _upstream("basic", {"schedulingPolicy": {"basic": {}}}),
                _upstream("zone", {"schedulingPolicy": {"gang": {"minCount": 2}},
                                   "schedulingConstraints": {"topology": [
                                       {"key": "topology.kubernetes.io/zone"}]}}),
            ]
        }
    )  # fmt: skip
    keys = ("gpucarve.io/rack", "kubernetes.io/hostname")
    assert specs[("ml", "gang")] == GroupSpec(4, priority_class="training", topology_keys=keys)
    # a basic policy starts its pods one by one
    assert specs[("ml", "basic")] == GroupSpec(1)
    # the policy's topology keys make modes of the keys: the narrowest wins
    policy_keys = TopologyKeys(rack="gpucarve.io/rack", nvlink_domain="nvidia.com/gpu.clique")
    assert resolve_topology(specs[("ml", "gang")], policy_keys, "ml/gang") == GroupSpec(
        4, topology="node", priority_class="training"
    )
    rack_only = GroupSpec(2, topology_keys=("gpucarve.io/rack",))
    assert resolve_topology(rack_only, policy_keys, "g") == GroupSpec(2, topology="rack")
    other = TopologyKeys(rack="example.com/rack", nvlink_domain="nvidia.com/gpu.clique")
    # a key the policy does not name is a problem naming it, never a placement anywhere
    for spec, keys_ in ((rack_only, other), (specs[("ml", "zone")], policy_keys)):
        problem = resolve_topology(spec, keys_, "ml/zone")
        assert isinstance(problem, Problem) and problem.code == "unknown-topology-key"
        assert spec.topology_keys[0] in problem.message
