"""The agents' faults as the scheduler reads them off the Nodes: the entry an agent writes, the
bare reason an agent before fault classes wrote, an unreadable annotation; and which of them
the inventory takes out of service within each pool's budget."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from gpucarve.config.examples import POLICY, example_path
from gpucarve.config.policy_build import load_policy
from gpucarve.core.gpu_faults import Action, Budget
from gpucarve.core.vocabulary import OUT_OF_SERVICE_ANNOTATION, POOL_LABEL, UNHEALTHY_ANNOTATION
from gpucarve.kube.view.nodes.device_truth import fault_entries, out_of_service_gpus
from gpucarve.kube.view.nodes.inventory import build_inventory

THREE_TEAMS = load_policy(example_path(POLICY), []).policy


def node(name: str, pool: str, faults: Any = None, **annotations: str) -> dict[str, Any]:
    notes = dict(annotations)
    if faults is not None:
        notes[UNHEALTHY_ANNOTATION] = faults if isinstance(faults, str) else json.dumps(faults)
    return {
        "metadata": {"name": name, "labels": {POOL_LABEL: pool}, "annotations": notes},
        "status": {
            "allocatable": {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "8"},
            "nodeInfo": {"bootID": "b1"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def test_entries_old_and_new_and_unreadable() -> None:
    new = {"2": {"reason": "XID 94", "class": "contained-memory", "action": "reset",
                 "since": 7, "boot": "b0", "reset": True}}  # fmt: skip
    (e,) = fault_entries(node("n", "training", new)).values()
    assert (e.fault_class, e.action, e.since, e.boot, e.reset) == (
        "contained-memory", Action.RESET, 7, "b0", True)  # fmt: skip
    old = fault_entries(node("n", "training", {"3": "XID 79"}))
    assert old[3].reason == "XID 79" and old[3].fault_class == "other-xid"
    assert old[3].boot == "b1"  # written on this boot
    assert fault_entries(node("n", "training", "{not json")) == {}
    assert out_of_service_gpus(
        node("n", "training", **{OUT_OF_SERVICE_ANNOTATION: '{"1": "x"}'})
    ) == {1}
    assert out_of_service_gpus(node("n", "training", **{OUT_OF_SERVICE_ANNOTATION: "[1"})) == set()


def test_the_inventory_takes_out_each_pools_budget_in_the_order_seen() -> None:
    def fault(since: int, cls: str = "nvlink") -> dict[str, Any]:
        return {"reason": "r", "class": cls, "action": "reset", "since": since}

    nodes = [
        node("training-0", "training", {"0": fault(30), "1": fault(10)}),
        node("training-1", "training", {str(g): fault(20 + g) for g in range(8)}),
        node("training-2", "training", {"5": fault(99, "fallen-off-bus")}),
        node("training-3", "training", {"6": fault(1, "throttled")}),
    ]
    health = dataclasses.replace(THREE_TEAMS.gpu_health, budget=Budget(gpus=4, percent=None))
    inv = build_inventory(dataclasses.replace(THREE_TEAMS, gpu_health=health), nodes)
    # the fatal one first (and counted), then the three seen first; the throttled one never
    assert sorted(inv.out_of_service) == [
        "training-0/gpu1", "training-1/gpu0", "training-1/gpu1", "training-2/gpu5"
    ]  # fmt: skip
    assert "training-3/gpu6" not in {**inv.out_of_service, **inv.held_in_service}
    assert sorted(inv.held_in_service) == ["training-0/gpu0"] + [
        f"training-1/gpu{g}" for g in range(2, 8)
    ]
    # what the scheduler holds out of placement is what is out of service
    assert set(inv.unhealthy) == set(inv.out_of_service)
    # the default budget, half the pool's 32 GPUs, takes all eleven
    assert len(build_inventory(THREE_TEAMS, nodes).out_of_service) == 11
