"""Dynamic MIG records on Kubernetes nodes: configurations named after their counts, layout
annotations decoded strictly, and the inventory building a dynamic node from its record (or
reporting a bad record and keeping the node out)."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from gpucarve.config.catalog_file import packaged_catalog
from gpucarve.config.policy_build import build_policy
from gpucarve.core.cluster import RECONFIGURING
from gpucarve.core.mig import Instance
from gpucarve.core.vocabulary import MIG_CHANGE_ANNOTATION as CHANGE_ANNOTATION
from gpucarve.core.vocabulary import MIG_LAYOUT_ANNOTATION as LAYOUT_ANNOTATION
from gpucarve.devcluster.nodes import node_manifests
from gpucarve.kube.view.cluster_view import build_view
from gpucarve.kube.view.nodes.inventory import MISMATCH_TAINT, build_inventory, node_key
from gpucarve.kube.view.nodes.mig_layout import (
    Change,
    NodeLayout,
    config_for,
    layout_annotation,
    node_layout,
)
from tests.dynamic_mig_policy import dynamic_mig_doc

DOC = dynamic_mig_doc()
POLICY = build_policy(DOC, packaged_catalog()).policy
POOL = POLICY.pools[0]
SEVEN = tuple(Instance(s, "1g.10gb") for s in range(7))
WHOLE = (Instance(0, "7g.80gb"),)
EPOCH = datetime(2026, 11, 29, tzinfo=UTC)


def test_configurations_are_named_after_their_counts() -> None:
    same, entries = config_for(POOL, (WHOLE, WHOLE))
    (entry,) = entries
    assert entry["devices"] == "all" and entry["mig-devices"] == {"7g.80gb": 1}
    assert entry["mig-enabled"] is True
    mixed, entries = config_for(POOL, (SEVEN, WHOLE))
    assert [e["devices"] for e in entries] == [[0], [1]]
    assert entries[0]["mig-devices"] == {"1g.10gb": 7}
    assert same != mixed and same.startswith("gpucarve-inf-")
    assert config_for(POOL, (SEVEN, WHOLE))[0] == mixed  # stable: nodes share it


def test_layout_annotations_are_decoded_strictly() -> None:
    good = layout_annotation(NodeLayout((SEVEN, WHOLE), "c", {0: "2026-11-29T00:00:00Z"}))
    parsed = node_layout({LAYOUT_ANNOTATION: good}, POOL)
    assert parsed.layouts == (SEVEN, WHOLE) and parsed.changed_at == {0: "2026-11-29T00:00:00Z"}
    assert node_layout({}, POOL).layouts == POOL.mig_layouts
    bad = json.loads(good)
    bad["layout"]["1"] = ["7g.80gb@0", "1g.10gb@0"]  # overlapping instances
    with pytest.raises(ValueError, match="GPU 1"):
        node_layout({LAYOUT_ANNOTATION: json.dumps(bad)}, POOL)
    with pytest.raises(ValueError, match="not JSON"):
        node_layout({LAYOUT_ANNOTATION: "{"}, POOL)


def _node(annotations: dict[str, str], allocatable: dict[str, str]) -> dict[str, Any]:
    (m,) = copy.deepcopy(node_manifests(POLICY))
    m["metadata"]["annotations"].update(annotations)
    m["status"]["allocatable"] = {**m["status"]["allocatable"], **allocatable}
    for k in [k for k in m["status"]["allocatable"] if k.startswith("nvidia.com/mig-")]:
        if k not in allocatable:
            del m["status"]["allocatable"][k]
    m["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    return m


def test_the_inventory_builds_a_dynamic_node_from_its_record() -> None:
    record = layout_annotation(NodeLayout((SEVEN, WHOLE), "c", {}))
    alloc = {"nvidia.com/mig-1g.10gb": "7", "nvidia.com/mig-7g.80gb": "1"}
    inv = build_inventory(POLICY, [_node({LAYOUT_ANNOTATION: record}, alloc)])
    assert not inv.problems
    (node,) = inv.cluster.nodes
    assert node.gpus[0].mig_layout == SEVEN and node.gpus[1].mig_layout == WHOLE
    # the record says 7 × 1g.10gb but the device plugin publishes the policy's layout
    inv = build_inventory(
        POLICY, [_node({LAYOUT_ANNOTATION: record}, {"nvidia.com/mig-7g.80gb": "2"})]
    )
    assert inv.problems and MISMATCH_TAINT in inv.cluster.nodes[0].taints
    # an unusable record: reported, the node kept out
    inv = build_inventory(
        POLICY, [_node({LAYOUT_ANNOTATION: "{"}, {"nvidia.com/mig-7g.80gb": "2"})]
    )
    assert "remove the annotation" in str(inv.problems[0])
    assert MISMATCH_TAINT in inv.cluster.nodes[0].taints


def test_a_change_in_flight_holds_its_new_instances_and_counts_as_a_change() -> None:
    change = Change("c", (SEVEN, WHOLE), (0,), "2026-11-29T00:01:00Z", True, "why")
    node = _node({CHANGE_ANNOTATION: change.to_json()}, {})  # device plugin paused: nothing
    inv = build_inventory(POLICY, [node])
    assert not inv.problems, "a node being reconfigured is not a mismatch"
    view = build_view(POLICY, inv, [], "gpucarve", EPOCH, {})
    held = {a.owner for a in view.snapshot.cluster.allocations.values()}
    assert held == {f"{RECONFIGURING}inf-0/gpu0"}
    assert sum(1 for sid in view.snapshot.cluster.allocations if "/gpu0/" in sid) == 7
    assert view.snapshot.mig_changed_at == {"inf-0/gpu0": 60}


def test_the_inventory_is_rebuilt_when_a_mig_record_changes() -> None:
    """The inventory is cached by what of a node it depends on: the MIG records are part of it
    (a change started on a node an administrator had cordoned changes nothing else)."""
    change = Change("c", (SEVEN, WHOLE), (0,), "2026-11-29T00:01:00Z", False, "why")
    plain = _node({}, {"nvidia.com/mig-7g.80gb": "2"})
    changing = _node({CHANGE_ANNOTATION: change.to_json()}, {"nvidia.com/mig-7g.80gb": "2"})
    assert node_key(plain) != node_key(changing)
    other = dict(plain, metadata={**plain["metadata"], "annotations": {"unrelated": "x"}})
    assert node_key(plain) == node_key(other)
