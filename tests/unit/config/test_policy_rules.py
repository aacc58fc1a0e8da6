"""Policy rules one at a time, on small documents built in the test."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpucarve.config.policy_build import build_policy
from gpucarve.core.catalog import Catalog
from gpucarve.core.mig import Instance
from gpucarve.core.problems import InvalidInput, Severity

BASE: dict[str, Any] = {
    "apiVersion": "gpucarve.io/v1alpha1",
    "kind": "Policy",
    "metadata": {"name": "t"},
    "pools": [
        {
            "name": "train",
            "gpuModel": "H100-SXM5-80GB",
            "nodes": 2,
            "gpusPerNode": 8,
            "sharing": "exclusive",
        },
        {
            "name": "infer",
            "gpuModel": "A100-80GB",
            "nodes": 2,
            "gpusPerNode": 2,
            "sharing": "mig",
            "mig": {"layout": {"3g.40gb": 2}},
        },
    ],
    "cohorts": [{"name": "all"}],
    "queues": [
        {"name": "a", "namespaces": ["a"], "cohort": "all", "quota": {"h100-full": {"nominal": 8}}},
        {"name": "b", "namespaces": ["b"], "cohort": "all", "quota": {"h100-full": {"nominal": 8}}},
    ],
}


def doc(**changes: Any) -> dict[str, Any]:
    d = copy.deepcopy(BASE)
    d.update(changes)
    return d


def problems(data: dict[str, Any], catalog: Catalog) -> list[tuple[str, str]]:
    with pytest.raises(InvalidInput) as exc:
        build_policy(data, catalog)
    return [(p.code, p.location) for p in exc.value.problems if p.severity is Severity.ERROR]


def test_base_is_valid(catalog: Catalog) -> None:
    loaded = build_policy(doc(), catalog)
    assert loaded.policy.capacity == {"a100-mig-3g.40gb": 8, "h100-full": 16}


def test_every_error_is_reported_at_once(catalog: Catalog) -> None:
    d = doc()
    d["pools"][0]["gpuModel"] = "H100-SXM5-80G"
    d["pools"][1]["mig"]["layout"] = {"3g.40gb": 3}
    d["queues"][0]["cohort"] = "nope"
    found = problems(d, catalog)
    assert ("unknown-gpu-model", "pools[0].gpuModel") in found
    assert ("mig-layout-invalid", "pools[1].mig.layout") in found


def test_quota_checks_run_when_pools_are_valid(catalog: Catalog) -> None:
    d = doc()
    d["queues"][0]["cohort"] = "nope"
    d["queues"][1]["quota"]["h100-full"]["nominal"] = 9
    found = problems(d, catalog)
    assert ("unknown-cohort", "queues[0].cohort") in found
    assert ("quota-exceeds-capacity", "queues") in found


def test_per_gpu_layouts(catalog: Catalog) -> None:
    d = doc()
    d["pools"][1]["mig"] = {
        "perGpu": [
            {"gpus": [0], "layout": {"7g.80gb": 1}},
            {"gpus": [1], "layout": {"1g.10gb": 7}},
        ]
    }
    pool = build_policy(d, catalog).policy.pool("infer")
    assert pool.mig_layouts[0] == (Instance(0, "7g.80gb"),)
    assert len(pool.mig_layouts[1]) == 7
    assert {f.name for f in pool.flavors()} == {"a100-mig-7g.80gb", "a100-mig-1g.10gb"}


@pytest.mark.parametrize(
    ("mig", "code", "where"),
    [
        (
            {"layout": {"3g.40gb": 1}, "perGpu": [{"gpus": [0, 1], "layout": {"3g.40gb": 1}}]},
            "mig-layout-missing",
            "pools[1].mig",
        ),
        ({}, "mig-layout-missing", "pools[1].mig"),
        (
            {"perGpu": [{"gpus": [0, 1, 2], "layout": {"3g.40gb": 1}}]},
            "bad-gpu-index",
            "pools[1].mig.perGpu[0].gpus",
        ),
        (
            {
                "perGpu": [
                    {"gpus": [0, 1], "layout": {"3g.40gb": 1}},
                    {"gpus": [1], "layout": {"7g.80gb": 1}},
                ]
            },
            "duplicate-gpu-index",
            "pools[1].mig.perGpu[1].gpus",
        ),
        ({"layout": {"3g.40gb": 0}}, "bad-count", "pools[1].mig.layout.3g.40gb"),
    ],
)
def test_mig_section_mistakes(catalog: Catalog, mig: dict[str, Any], code: str, where: str) -> None:
    d = doc()
    d["pools"][1]["mig"] = mig
    assert (code, where) in problems(d, catalog)


@pytest.mark.parametrize(
    ("change", "code", "where"),
    [
        ({"replicas": 4}, "replicas-not-allowed", "pools[0].replicas"),
        ({"sharing": "time-slicing", "replicas": 1}, "out-of-range", "pools[0].replicas"),
        ({"mig": {"layout": {"7g.80gb": 1}}}, "mig-not-allowed", "pools[0].mig"),
        ({"nodeLabels": {"bad key!": "x"}}, "bad-label", "pools[0].nodeLabels.bad key!"),
        ({"nodeLabels": {"ok": "-bad-"}}, "bad-label", "pools[0].nodeLabels.ok"),
        ({"topology": {"nodesPerRack": 5}}, "out-of-range", "pools[0].topology.nodesPerRack"),
        (
            {"nodes": 6, "topology": {"nodesPerRack": 2, "nodesPerBlock": 3}},
            "out-of-range",
            "pools[0].topology.nodesPerBlock",
        ),
        (
            {"taints": [{"key": "k", "effect": "Sometimes"}]},
            "bad-value",
            "pools[0].taints[0].effect",
        ),
        ({"nodes": 0}, "out-of-range", "pools[0].nodes"),
        ({"nodes": True}, "wrong-type", "pools[0].nodes"),
        ({"name": "Train_Pool"}, "bad-format", "pools[0].name"),
    ],
)
def test_pool_mistakes(catalog: Catalog, change: dict[str, Any], code: str, where: str) -> None:
    d = doc()
    d["pools"][0].update(change)
    assert (code, where) in problems(d, catalog)


@pytest.mark.parametrize(
    ("change", "code", "where"),
    [
        (
            {"quota": {"h100-full": {"nominal": 8, "borrowingLimit": 2}}, "cohort": None},
            "limit-without-cohort",
            "queues[0].quota.h100-full.borrowingLimit",
        ),
        (
            {"maxPerWorkload": {"h100-ful": 2}},
            "unknown-flavor",
            "queues[0].maxPerWorkload.h100-ful",
        ),
        (
            {"maxPerWorkload": {"h100-full": 0}},
            "out-of-range",
            "queues[0].maxPerWorkload.h100-full",
        ),
        ({"weight": 0}, "out-of-range", "queues[0].weight"),
        ({"namespaces": []}, "bad-length", "queues[0].namespaces"),
        ({"name": "b"}, "duplicate-queue", "queues[1].name"),
    ],
)
def test_queue_mistakes(catalog: Catalog, change: dict[str, Any], code: str, where: str) -> None:
    d = doc()
    d["queues"][0].update(change)
    assert (code, where) in problems(d, catalog)


def test_two_default_priority_classes(catalog: Catalog) -> None:
    d = doc(
        priorityClasses=[
            {"name": "x", "value": 1, "preemptible": True, "default": True},
            {"name": "y", "value": 2, "preemptible": True, "default": True},
        ]
    )
    assert ("two-defaults", "priorityClasses") in problems(d, catalog)


def test_lonely_cohort_is_a_warning_not_an_error(catalog: Catalog) -> None:
    d = doc(cohorts=[{"name": "all"}, {"name": "empty"}])
    d["queues"][0]["quota"]["a100-mig-3g.40gb"] = {"nominal": 8}
    loaded = build_policy(d, catalog)
    assert [(w.code, w.location, w.severity) for w in loaded.warnings] == [
        ("lonely-cohort", "cohorts[1]", Severity.WARNING)
    ]


def test_capacity_outside_every_nominal_quota_is_a_warning(catalog: Catalog) -> None:
    d = doc()
    d["queues"][1]["quota"]["h100-full"] = {"nominal": 4}
    loaded = build_policy(d, catalog)
    found = {w.code: w.message for w in loaded.warnings}
    assert set(found) == {"quota-leaves-capacity-idle"}
    messages = sorted(w.message for w in loaded.warnings)
    assert messages == [
        "no queue has quota for a100-mig-3g.40gb: its 8 slices can never be used",
        "nominal quotas for h100-full add up to 12 of the 16 slices the pools hold: "
        "4 can never be used",
    ]
    d["queues"][1]["quota"]["h100-full"] = {"nominal": 8}
    d["queues"][1]["quota"]["a100-mig-3g.40gb"] = {"nominal": 8}
    assert build_policy(d, catalog).warnings == ()


def test_flavor_prefix_separates_pools(catalog: Catalog) -> None:
    d = doc()
    d["pools"].append(
        {
            "name": "train-east",
            "gpuModel": "H100-SXM5-80GB",
            "nodes": 1,
            "gpusPerNode": 8,
            "sharing": "exclusive",
            "flavorPrefix": "h100-east",
        }
    )
    caps = build_policy(d, catalog).policy.capacity
    assert caps["h100-full"] == 16 and caps["h100-east-full"] == 8


def test_same_flavor_from_two_pools_adds_capacity(catalog: Catalog) -> None:
    d = doc()
    d["pools"].append(
        {
            "name": "train2",
            "gpuModel": "NVIDIA-H100-80GB-HBM3",
            "nodes": 1,
            "gpusPerNode": 4,
            "sharing": "exclusive",
        }
    )
    assert build_policy(d, catalog).policy.capacity["h100-full"] == 20


def test_weight_is_kept_in_thousandths(catalog: Catalog) -> None:
    d = doc()
    d["queues"][0]["weight"] = 1.5
    assert build_policy(d, catalog).policy.queue("a").weight_milli == 1500


@pytest.mark.parametrize("bad", [None, [], "text", 3, {"apiVersion": 1}])
def test_non_mapping_documents(catalog: Catalog, bad: Any) -> None:
    with pytest.raises(InvalidInput) as exc:
        build_policy(bad, catalog)
    assert exc.value.problems


def test_dynamic_mig_profiles_add_flavors_and_unknown_ones_are_named(catalog: Catalog) -> None:
    d = doc()
    d["pools"][1]["mig"]["dynamic"] = {"profiles": ["1g.10gb", "7g.80gb"]}
    pool = build_policy(d, catalog).policy.pools[1]
    assert {f.profile for f in pool.flavors()} == {"1g.10gb", "3g.40gb", "7g.80gb"}
    # capacity: every GPU carved into as many of the profile as fit (7 × 1g.10gb per GPU)
    assert build_policy(d, catalog).policy.capacity["a100-mig-1g.10gb"] == 4 * 7
    d["pools"][1]["mig"]["dynamic"] = {"profiles": ["1g.10gb", "5g.50gb", "1g.10gb+me"]}
    assert problems(d, catalog) == [
        ("unknown-mig-profile", "pools[1].mig.dynamic.profiles[1]"),
        ("unknown-mig-profile", "pools[1].mig.dynamic.profiles[2]"),
    ]
    # without `dynamic` a static pool offers only what its layout carves
    assert {f.profile for f in build_policy(doc(), catalog).policy.pools[1].flavors()} == {
        "3g.40gb"
    }
