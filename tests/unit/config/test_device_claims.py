"""DRA pools and claims in the policy and workload documents: selectors judged on each DRA
flavor's devices, the pools apart from the device plugin's, errors that name the selector."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucarve.config.device_select import (
    Device,
    Selectors,
    device_from_slice,
    match_flavors,
    policy_devices,
)
from gpucarve.config.policy_build import load_policy, load_policy_text
from gpucarve.config.workload_spec import build_workload
from gpucarve.core.cluster import build_cluster
from gpucarve.core.problems import InvalidInput
from gpucarve.core.snapshot import Snapshot
from gpucarve.core.workload import GpuKind
from gpucarve.engine.engine import Engine
from tests.paths import EXAMPLES

POLICY = load_policy(EXAMPLES / "dra" / "policy.yaml").policy
PRODUCT = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"'
MEMORY = 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("{}")) >= 0'


def claim(*selectors: str, count: int = 1, cls: str = "gpu.nvidia.com") -> dict[str, Any]:
    return {
        "name": "job",
        "namespace": "research",
        "podSets": [
            {"deviceClaims": [{"deviceClassName": cls, "count": count, "selectors": [*selectors]}]}
        ],
    }


def codes(doc: dict[str, Any]) -> list[tuple[str, str]]:
    _, problems = build_workload(doc, POLICY)
    return [(p.code, p.message) for p in problems]


def test_a_claim_asks_whole_gpus_of_the_dra_flavors_its_selectors_match() -> None:
    w, problems = build_workload(claim(PRODUCT, count=4), POLICY)
    assert problems == []
    assert w is not None
    gpu = w.pod_sets[0].gpu
    want = (GpuKind.WHOLE, 4, True, ("h100-dra-full",))
    assert (gpu.kind, gpu.count, gpu.dra, gpu.flavors) == want
    w, problems = build_workload(claim(MEMORY.format("40Gi")), POLICY)
    assert problems == [] and w is not None
    assert w.pod_sets[0].gpu.flavors == ("h100-dra-full",)


def test_a_selector_that_matches_nothing_is_named_with_the_devices_there_are() -> None:
    [(code, message)] = codes(claim(MEMORY.format("100Gi")))
    assert code == "no-device-matches"
    assert 'quantity("100Gi")' in message and "matches no device" in message
    assert "h100-dra-full: NVIDIA H100 80GB HBM3 with 79 GiB" in message
    [(code, message)] = codes(claim("device.attributes[", count=1))
    assert code == "no-device-matches" and "is not a CEL expression" in message
    # a selector on what names one device is refused: gpucarve places by flavor
    [(code, message)] = codes(claim('device.attributes["gpu.nvidia.com"].uuid == "GPU-1"'))
    assert code == "device-selector-singles-out" and "uuid" in message


def test_unknown_device_class_and_claims_beside_resources_are_refused() -> None:
    assert [c for c, _ in codes(claim(cls="resource.example.com"))] == ["unknown-device-class"]
    doc = claim(PRODUCT)
    doc["podSets"][0]["resources"] = {"limits": {"nvidia.com/gpu": 1}}
    assert [c for c, _ in codes(doc)] == ["claims-with-resources"]


def test_a_policy_without_dra_pools_says_which_setting_is_missing(tmp_path: Path) -> None:
    raw = yaml.safe_load((EXAMPLES / "dra" / "policy.yaml").read_text())
    for pool in raw["pools"]:
        pool["devices"] = "device-plugin"
    raw["queues"] = raw["queues"][:1]
    raw["queues"][0]["quota"] = {"h100-full": {"nominal": 16}, "a100-full": {"nominal": 8}}
    plain = load_policy_text(yaml.safe_dump(raw), "p.yaml").policy
    _, problems = build_workload(claim(PRODUCT), plain)
    assert [p.code for p in problems] == ["no-dra-pool"]
    assert "devices: dra" in problems[0].fix


def test_what_a_dra_pool_may_not_be(tmp_path: Path) -> None:
    raw = yaml.safe_load((EXAMPLES / "dra" / "policy.yaml").read_text())
    raw["pools"][2]["renameByDefault"] = False  # the device plugin's: meaningless here
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(InvalidInput) as exc:
        load_policy(path)
    found = {(p.code, p.location) for p in exc.value.problems}
    assert found == {("dra-rename", "pools[2].renameByDefault")}


def test_dynamic_mig_on_a_dra_pool_keeps_instances_in_use_and_changes_at_once(
    tmp_path: Path,
) -> None:
    """Partitions are devices the driver creates at allocation: a GPU's free memory slices
    are reshaped without touching its instances in use, and with no minimum interval, unless
    the pool says otherwise; a device-plugin pool keeps the MIG manager's defaults."""
    raw = yaml.safe_load((EXAMPLES / "dra" / "policy.yaml").read_text())
    raw["pools"][1]["mig"]["dynamic"] = {"enabled": True}
    raw["pools"][3]["sharing"] = "mig"
    raw["pools"][3]["mig"] = {"layout": {"7g.80gb": 1}, "dynamic": {"enabled": True}}
    for q in raw["queues"]:
        q["quota"].pop("a100-full", None)
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(raw))
    pools = {p.name: p for p in load_policy(path).policy.pools}
    dra, plugin = pools[raw["pools"][1]["name"]], pools[raw["pools"][3]["name"]]
    assert dra.mig_dynamic is not None and plugin.mig_dynamic is not None
    assert (dra.mig_dynamic.keep_in_use, dra.mig_dynamic.min_interval_s) == (True, 0)
    assert (plugin.mig_dynamic.keep_in_use, plugin.mig_dynamic.min_interval_s) == (False, 600)
    raw["pools"][1]["mig"]["dynamic"] = {"granularity": "gpu", "minSecondsBetweenChanges": 60}
    path.write_text(yaml.safe_dump(raw))
    dra = next(p for p in load_policy(path).policy.pools if p.name == raw["pools"][1]["name"])
    assert dra.mig_dynamic is not None
    assert (dra.mig_dynamic.keep_in_use, dra.mig_dynamic.min_interval_s) == (False, 60)


def test_claims_and_device_plugin_requests_never_share_a_pool() -> None:
    docs = yaml.safe_load((EXAMPLES / "dra" / "workloads.yaml").read_text())["workloads"]
    plugin = copy.deepcopy(docs[2])
    plugin["name"] = "plugin-2"
    # the A100 node is full: it waits, though an H100 node has 7 GPUs free
    plugin["podSets"][0]["resources"] = {"limits": {"nvidia.com/gpu": 4}}
    workloads = []
    for doc in [*docs, plugin]:
        w, problems = build_workload(doc, POLICY)
        assert problems == [] and w is not None
        workloads.append(w)
    snap = Snapshot(POLICY, build_cluster(POLICY), (), tuple(workloads))
    result = Engine().run_cycle(snap, 100)
    pools = {
        a.workload: {POLICY_POOL[p.node.rsplit("-", 1)[0]] for p in a.pods}
        for a in result.admissions
    }
    assert pools == {
        "research/by-product": {"dra"},
        "research/at-least-40gib": {"dra"},
        "research/plugin": {"plugin"},
        "research/partition": {"dra"},
        "research/notebook": {"dra"},
    }
    assert "research/plugin-2" in {p.workload for p in result.pending}


POLICY_POOL = {"h100": "dra", "a100-mig": "dra", "l40s": "dra", "a100": "plugin"}


def test_selectors_are_judged_on_the_devices_a_resource_slice_publishes() -> None:
    raw = {
        "name": "gpu-0",
        "attributes": {
            "type": {"string": "gpu"},
            "uuid": {"string": "GPU-abc"},
            "productName": {"string": "NVIDIA H200"},
            "gpu.nvidia.com/architecture": {"string": "Hopper"},
            "resource.kubernetes.io/pcieRoot": {"string": "pci0000:00"},
        },
        "capacity": {"memory": {"value": "141Gi"}},
    }
    device = device_from_slice("gpu.nvidia.com", raw)
    assert device == Device(
        "gpu.nvidia.com",
        {"type": "gpu", "productName": "NVIDIA H200", "architecture": "Hopper"},
        {"memory": 141 * 1024**3},
    )
    judge = Selectors()
    devices = {"h200-dra-full": [device]}
    assert match_flavors([MEMORY.format("100Gi")], devices, judge).flavors == ("h200-dra-full",)
    arch = 'device.attributes["gpu.nvidia.com"].architecture == "Ampere"'
    assert match_flavors([arch], devices, judge).flavors == ()


def test_a_mig_claim_asks_one_profile_of_a_dra_mig_pool() -> None:
    profile = 'device.attributes["gpu.nvidia.com"].profile == "{}"'
    doc = claim(profile.format("3g.40gb"), cls="mig.nvidia.com")
    w, problems = build_workload(doc, POLICY)
    assert problems == [] and w is not None
    gpu = w.pod_sets[0].gpu
    want = (GpuKind.MIG, "3g.40gb", True, ("a100-dra-mig-3g.40gb",))
    assert (gpu.kind, gpu.profile, gpu.dra, gpu.flavors) == want
    # no profile named: several match, and the fix says how to pick one
    [(code, message)] = codes(claim(cls="mig.nvidia.com"))
    assert code == "several-mig-profiles" and "1g.10gb, 2g.20gb, 3g.40gb" in message
    # a whole-GPU claim never gets a MIG device, nor a MIG claim a whole GPU
    assert codes(claim(profile.format("3g.40gb")))[0][0] == "no-device-matches"


def test_a_share_of_a_gpu_is_claimed_by_its_memory() -> None:
    doc = claim()
    doc["podSets"][0]["deviceClaims"][0]["capacity"] = {"memory": "20Gi"}
    w, problems = build_workload(doc, POLICY)
    assert problems == [] and w is not None
    gpu = w.pod_sets[0].gpu
    want = (GpuKind.FRACTION, 20 * 1024, True, ("l40s-dra-shared",))
    assert (gpu.kind, gpu.memory_mib, gpu.dra, gpu.flavors) == want
    doc["podSets"][0]["deviceClaims"][0].update(count=2)
    assert [c for c, _ in codes(doc)] == ["share-count"]
    doc["podSets"][0]["deviceClaims"][0].update(count=1, capacity={"cores": "2"})
    assert [c for c, _ in codes(doc)] == ["unknown-capacity"]


def test_the_single_mig_strategy_is_the_device_plugins(tmp_path: Path) -> None:
    raw = yaml.safe_load((EXAMPLES / "dra" / "policy.yaml").read_text())
    raw["pools"][1]["mig"] = {"layout": {"3g.40gb": 2}, "strategy": "single"}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(InvalidInput) as exc:
        load_policy(path)
    assert ("dra-single-strategy", "pools[1].mig.strategy") in {
        (p.code, p.location) for p in exc.value.problems
    }


def test_a_selector_nested_past_reason_is_an_error_not_a_crash() -> None:
    deep = "(" * 3000 + "true" + ")" * 3000
    [(code, message)] = codes(claim(deep))
    assert code == "no-device-matches" and "nested too deeply" in message


def test_selectors_that_single_out_devices_are_refused_not_honoured_in_part() -> None:
    """gpucarve places a claim on a kind of device: a selector that names one device (its
    uuid) or takes some devices of a flavor and not others (a driver version only some nodes
    have) would be honoured in part, so it is refused with the way to select instead."""
    by_uuid = 'device.attributes["gpu.nvidia.com"].uuid == "GPU-h100-0-3"'
    [(code, message)] = codes(claim(by_uuid))
    assert code == "device-selector-singles-out" and "picks one device" in message
    h100 = next(iter(policy_devices(POLICY)["h100-dra-full"]))
    newer = Device(h100.driver, {**h100.attributes, "driverVersion": "580.1.0"}, h100.capacity)
    older = Device(h100.driver, {**h100.attributes, "driverVersion": "570.1.0"}, h100.capacity)
    devices = {**policy_devices(POLICY), "h100-dra-full": (newer, older)}
    some = 'device.attributes["gpu.nvidia.com"].driverVersion == "580.1.0"'
    _, problems = build_workload(claim(some), POLICY, devices=devices)
    (p,) = problems
    assert (
        p.code == "device-selector-singles-out"
        and "1 of the 2 devices of h100-dra-full" in p.message
    )
    # what every device of the kind shares is fine
    w, problems = build_workload(claim(PRODUCT), POLICY, devices=devices)
    assert problems == [] and w is not None


def test_a_selector_that_costs_too_much_to_judge_is_refused_before_it_runs() -> None:
    """A tenant's selector could hold the webhook and the scheduler for minutes (macros nested
    over long lists): its cost is bounded before it is evaluated, and the claim is refused
    with why, as `plan` and the webhook judge it."""
    from gpucarve.config.device_select import MAX_SELECTOR_COST, Selectors

    numbers = "[" + ",".join(str(i) for i in range(60)) + "]"
    costly = f"{numbers}.all(a, {numbers}.all(b, {numbers}.all(c, a + b + c >= 0)))"
    verdict = Selectors().program(costly)
    assert isinstance(verdict, str) and "costs too much to judge" in verdict, verdict
    assert str(MAX_SELECTOR_COST) in verdict
    # an ordinary selector, and a small macro, are judged
    ordinary = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"'
    assert not isinstance(Selectors().program(ordinary), str)
    assert not isinstance(Selectors().program("[1, 2, 3].all(x, x > 0)"), str)
