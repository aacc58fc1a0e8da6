"""The view's side of Dynamic Resource Allocation, without a server: a DRA pool's nodes held
to their ResourceSlices, pending pods' claims as requests (or why they wait), allocated
claims holding their devices (never promised twice), and the status written for a bound
pod's claims."""

from __future__ import annotations

import copy
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml

from gpucarve.config.policy_build import load_policy, load_policy_text
from gpucarve.devcluster.nodes import slice_manifests
from gpucarve.engine.engine import run_cycle
from gpucarve.kube.scheduler.claim_allocation import allocation_for
from gpucarve.kube.view.cluster_view import build_view
from gpucarve.kube.view.nodes.devices import read_slices
from gpucarve.kube.view.nodes.inventory import MISMATCH_TAINT, build_inventory
from gpucarve.kube.view.pods.claims import PodClaims, attach_claims
from tests.paths import EXAMPLES
from tests.unit.kube.view.test_cluster_view import ready_nodes

POLICY = load_policy(EXAMPLES / "dra" / "policy.yaml", []).policy
EPOCH = datetime(2026, 12, 3, tzinfo=UTC)
PRODUCT = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"'


def nodes() -> list[dict[str, Any]]:
    return ready_nodes(POLICY)


def claim(name: str, count: int = 1, *selectors: str, status: Any = None) -> dict[str, Any]:
    request = {"deviceClassName": "gpu.nvidia.com", "count": count,
               "selectors": [{"cel": {"expression": s}} for s in selectors]}  # fmt: skip
    out: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "research", "resourceVersion": "7"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}},
    }
    if status is not None:
        out["status"] = status
    return out


def pod(name: str, claim_name: str, node: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "gpucarve",
        "resourceClaims": [{"name": "gpu", "resourceClaimName": claim_name}],
        "containers": [{"name": "c", "resources": {"claims": [{"name": "gpu"}]}}],
    }
    if node:
        spec["nodeName"] = node
    return {
        "metadata": {"name": name, "namespace": "research", "uid": f"uid-{name}",
                     "creationTimestamp": "2026-12-03T00:00:10Z", "resourceVersion": "3"},
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }  # fmt: skip


def allocated(node: str, devices: list[str], pod_name: str | None) -> dict[str, Any]:
    results = [{"request": "gpu", "driver": "gpu.nvidia.com", "pool": node, "device": d}
               for d in devices]  # fmt: skip
    status: dict[str, Any] = {"allocation": {"devices": {"results": results}}}
    if pod_name:
        status["reservedFor"] = [{"resource": "pods", "name": pod_name, "uid": "u"}]
    return status


def test_a_dra_node_must_publish_its_pools_gpus_in_a_resource_slice() -> None:
    slices = slice_manifests(POLICY)
    assert [s["spec"]["nodeName"] for s in slices] == ["h100-0", "h100-1", "a100-mig-0", "l40s-0"]
    inv = build_inventory(POLICY, nodes(), read_slices(slices))
    assert inv.problems == ()
    assert sorted(inv.dra_devices) == [
        "a100-dra-mig-1g.10gb", "a100-dra-mig-2g.20gb", "a100-dra-mig-3g.40gb", "h100-dra-full",
        "l40s-dra-shared",
    ]  # fmt: skip
    # h100-1's driver publishes 7 GPUs of another product: both named, the node kept out
    bad = copy.deepcopy(slices)
    bad[1]["spec"]["devices"].pop()
    # the MIG node's driver shows GPU 1's 3g.40gb at another placement
    mig = next(d for d in bad[2]["spec"]["devices"] if d["name"].startswith("gpu-1-mig-9-"))
    mig["name"] = "gpu-1-mig-9-0-4"
    for d in bad[1]["spec"]["devices"]:
        d["attributes"]["productName"] = {"string": "NVIDIA A100-SXM4-80GB"}
    inv = build_inventory(POLICY, nodes(), read_slices(bad[1:3]))
    text = [str(p) for p in inv.problems]
    assert any("node h100-0: publishes no device in a ResourceSlice" in t for t in text), text
    assert any("h100-1: its ResourceSlices lack gpu7, which the pool has" in t for t in text)
    assert any("NVIDIA-A100-SXM4-80GB" in t and "gpuModel" in t for t in text), text
    want = "publish gpu1/3g.40gb@0, which the pool has not and lack gpu1/3g.40gb@4"
    assert any(want in t for t in text), text
    tainted = {n.name for n in inv.cluster.nodes if MISMATCH_TAINT in n.taints}
    assert tainted == {"h100-0", "h100-1", "a100-mig-0", "l40s-0"}


def test_pending_claims_become_requests_or_say_why_they_wait() -> None:
    claims = {
        "research/mine": claim("mine", 2, PRODUCT),
        "research/shared": claim("shared", status=allocated("h100-0", ["gpu-0"], "other")),
        "research/all": claim("all"),
    }
    claims["research/all"]["spec"]["devices"]["requests"][0]["exactly"]["allocationMode"] = "All"
    pods = [pod("a", "mine"), pod("b", "shared"), pod("c", "all"), pod("d", "nowhere")]
    asked, waiting = attach_claims(pods, claims)
    assert list(asked) == ["research/a"]
    assert asked["research/a"].versions == ("7",)  # the claim's version counts too
    assert len(asked["research/a"].requests) == 1 and asked["research/a"].node is None
    assert waiting["research/b"].startswith("dra/claim-shared:")
    assert waiting["research/c"].startswith("dra/claim-unsupported:")
    assert waiting["research/d"].startswith("dra/claim-missing:")


def test_allocated_claims_hold_their_devices_and_nothing_is_promised_twice() -> None:
    slices = slice_manifests(POLICY)
    inv = build_inventory(POLICY, nodes(), read_slices(slices))
    held = [f"gpu-{g}" for g in range(8)]
    claims = [
        # a pod bound by another scheduler, its claim allocated and reserved for it
        claim("theirs", 8, status=allocated("h100-0", held, "theirs")),
        # a claim reserved for no pod (its pod's binding failed): still holds its GPUs
        claim("orphan", 7, status=allocated("h100-1", held[:7], None)),
        claim("wants", 1),
    ]
    foreign = pod("theirs", "theirs", node="h100-0")
    foreign["spec"]["schedulerName"] = "default-scheduler"
    view = build_view(POLICY, inv, [foreign, pod("wants", "wants")], "gpucarve", EPOCH, {},
                      claims=claims)  # fmt: skip
    owners = {sid: a.owner for sid, a in view.snapshot.cluster.allocations.items()}
    assert sum(o == "research/theirs" for o in owners.values()) == 8
    assert sum(o == "claim:research/orphan" for o in owners.values()) == 7
    # bound past the queue in a governed namespace: charged to it, as device-plugin pods are
    assert view.elsewhere == {"research/theirs": "research"}
    [theirs] = [rw for rw in view.snapshot.running if rw.workload.id == "research/theirs"]
    assert theirs.workload.pod_sets[0].gpu.count == 8
    assert {p.flavor for p in theirs.pods} == {"h100-dra-full"}
    result = run_cycle(view.snapshot, 100)
    [admission] = result.admissions
    [placed] = admission.pods
    assert placed.slice_ids == ("h100-1/gpu7",)  # the one H100 nobody holds


def test_the_status_written_for_a_bound_pods_claims() -> None:
    dra = read_slices(slice_manifests(POLICY))
    claims = {"research/mine": claim("mine", 2)}
    slices = ["h100-1/gpu3", "h100-1/gpu5"]
    [(name, status)] = allocation_for(pod("a", "mine"), claims, "h100-1", slices, dra)
    assert name == "research/mine"
    results = status["allocation"]["devices"]["results"]
    assert [(r["pool"], r["device"]) for r in results] == [("h100-1", "gpu-3"), ("h100-1", "gpu-5")]
    terms = status["allocation"]["nodeSelector"]["nodeSelectorTerms"]
    assert terms[0]["matchFields"][0]["values"] == ["h100-1"]
    assert status["reservedFor"] == [{"resource": "pods", "name": "a", "uid": "uid-a"}]
    with pytest.raises(ValueError, match="left for request"):
        allocation_for(pod("a", "mine"), claims, "h100-1", slices[:1], dra)


def test_a_share_of_a_gpu_is_one_result_with_its_memory_and_holds_its_replicas() -> None:
    slices = slice_manifests(POLICY)
    dra = read_slices(slices)
    share = claim("share")
    share["metadata"]["uid"] = "claim-uid"
    share["spec"]["devices"]["requests"][0]["exactly"]["capacity"] = {
        "requests": {"memory": "20Gi"}
    }
    claims = {"research/share": share}
    replicas = ["l40s-0/gpu1/r0", "l40s-0/gpu1/r1"]
    [(_, status)] = allocation_for(pod("n", "share"), claims, "l40s-0", replicas, dra)
    [result] = status["allocation"]["devices"]["results"]
    assert (result["device"], result["consumedCapacity"]) == ("gpu-1", {"memory": "20Gi"})
    again = allocation_for(pod("n", "share"), claims, "l40s-0", replicas, dra)
    assert again[0][1]["allocation"]["devices"]["results"][0]["shareID"] == result["shareID"]
    # allocated for a pod another scheduler bound: it holds the replicas that memory takes
    share["status"] = {**status, "reservedFor": [{"resource": "pods", "name": "n", "uid": "u"}]}
    inv = build_inventory(POLICY, nodes(), dra)
    foreign = pod("n", "share", node="l40s-0")
    foreign["spec"]["schedulerName"] = "default-scheduler"
    view = build_view(POLICY, inv, [foreign], "gpucarve", EPOCH, {}, claims=[share])
    held = sorted(s for s, a in view.snapshot.cluster.allocations.items()
                  if a.owner == "research/n")  # fmt: skip
    assert held == ["l40s-0/gpu1/r0", "l40s-0/gpu1/r1"]


def test_one_claim_named_by_two_waiting_pods_goes_to_the_first_only() -> None:
    asked, waiting = attach_claims(
        [pod("a", "mine"), pod("b", "mine")], {"research/mine": claim("mine")}
    )
    assert list(asked) == ["research/a"]
    assert waiting["research/b"].startswith(
        "dra/claim-shared: ResourceClaim research/mine is named by pod research/a too"
    )


def test_the_writer_never_takes_a_claim_from_the_pod_it_is_reserved_for() -> None:
    import ssl

    from gpucarve.kube.api.client import ApiError, Client
    from gpucarve.kube.scheduler.claim_writer import ClaimWriter

    # no server behind it: the refusal must come before any call
    client = Client("https://127.0.0.1:9", ssl.create_default_context(), {})
    writer = ClaimWriter(client, None, lambda: read_slices(slice_manifests(POLICY)))
    held = claim("mine", status=allocated("h100-0", ["gpu-0"], "other"))
    # what the binder would write for pod a had the cache shown the claim free
    [(_, status)] = allocation_for(
        pod("a", "mine"), {"research/mine": claim("mine")}, "h100-1", ["h100-1/gpu0"],
        read_slices(slice_manifests(POLICY)),
    )  # fmt: skip
    with pytest.raises(ApiError, match="in use by"):
        writer._write_one("research/mine", held, status)


def _dynamic_policy() -> Any:
    raw = yaml.safe_load((EXAMPLES / "dra" / "policy.yaml").read_text())
    raw["pools"][1]["mig"]["dynamic"] = {"profiles": ["7g.80gb"]}
    return load_policy_text(yaml.safe_dump(raw), "dynamic.yaml").policy


def test_a_dynamic_mig_dra_node_publishes_partitionable_devices_with_counters() -> None:
    """Every placement of every profile the pool may carve, consuming its GPU's memory-slice
    counters; the node agrees with its pool whatever its layout now, and each partition joins
    its profile's flavor, so a selector for a profile not carved yet finds its devices."""
    policy = _dynamic_policy()
    slices = [s for s in slice_manifests(policy) if s["spec"]["nodeName"] == "a100-mig-0"]
    counters, *per_gpu = slices
    sets = counters["spec"]["sharedCounters"]
    assert [c["name"] for c in sets] == ["gpu-0-counters", "gpu-1-counters"]
    assert sorted(sets[0]["counters"]) == [f"memory-slice-{k}" for k in range(8)]
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in slices} == {3}
    by_name = {d["name"]: d for s in per_gpu for d in s["spec"]["devices"]}
    # 3g.40gb at memory slice 4 of GPU 1 consumes slices 4 to 7 of GPU 1's counters
    (use,) = by_name["gpu-1-mig-9-4-4"]["consumesCounters"]
    assert use["counterSet"] == "gpu-1-counters"
    assert sorted(use["counters"]) == [f"memory-slice-{k}" for k in range(4, 8)]
    assert "gpu-0-mig-0-0-8" in by_name  # 7g.80gb: a profile the layout does not have
    inv = build_inventory(policy, ready_nodes(policy), read_slices(slice_manifests(policy)))
    assert inv.problems == ()
    # the slots: 3g.40gb starts at 0 or 4 on each GPU, 7g.80gb at 0 (no GPU is carved so now)
    units = set(inv.dra.slots["a100-mig-0"])
    assert {"gpu0/3g.40gb@0", "gpu1/3g.40gb@4", "gpu0/7g.80gb@0", "gpu1/7g.80gb@0"} <= units
    (whole,) = inv.dra_devices["a100-dra-mig-7g.80gb"]  # devices as selectors see them
    assert whole.attributes["profile"] == "7g.80gb"
    # a partition of a profile the pool does not carve is still the driver's mistake
    wrong = copy.deepcopy(slices)
    wrong[1]["spec"]["devices"][0]["attributes"]["profile"] = {"string": "1g.20gb"}
    inv = build_inventory(policy, ready_nodes(policy), read_slices(wrong))
    assert any("which the pool has not" in str(p) for p in inv.problems), inv.problems


def test_a_pod_sharing_an_allocated_claim_runs_on_its_node_and_asks_for_no_device() -> None:
    """One ResourceClaim named by several pods: the first placed allocates it; the others
    follow it to its node, ask for no device of it (its devices are held and charged once,
    through the pod that allocated it) and are added to its reservedFor."""
    slices = slice_manifests(POLICY)
    inv = build_inventory(POLICY, nodes(), read_slices(slices))
    status = allocated("h100-1", ["gpu-2", "gpu-3"], "z-first")
    status["allocation"]["nodeSelector"] = {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["h100-1"]}]}]}  # fmt: skip
    # reserved for the pod that allocated it, then one already bound beside it
    status["reservedFor"].append({"resource": "pods", "name": "a-bound", "uid": "u"})
    shared = claim("shared", 2, status=status)
    first = pod("z-first", "shared", node="h100-1")
    beside = pod("a-bound", "shared", node="h100-1")
    follower = pod("a-second", "shared")  # named before it: held by the allocator still
    asked, waiting = attach_claims([follower], {"research/shared": shared})
    assert waiting == {} and asked["research/a-second"] == PodClaims((), ("7",), "h100-1")
    view = build_view(POLICY, inv, [first, beside, follower], "gpucarve", EPOCH, {},
                      claims=[shared])  # fmt: skip
    owners = Counter(a.owner for a in view.snapshot.cluster.allocations.values())
    assert owners == {"research/z-first": 2}  # held once, by the pod that allocated it
    [w] = view.snapshot.pending
    assert w.pod_sets[0].gpu.count == 0  # no device asked: the claim's are allocated
    result = run_cycle(view.snapshot, 100)
    [admission] = result.admissions
    assert [p.node for p in admission.pods] == ["h100-1"]  # where the claim's devices are
    # the writer adds it to reservedFor; no allocation of its own is written
    assert allocation_for(follower, {"research/shared": shared}, "h100-1", [],
                          read_slices(slices)) == []  # fmt: skip
    # a pod that names another node itself can never use the claim's devices: it waits
    elsewhere = pod("a-second", "shared")
    elsewhere["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "h100-0"}
    asked, waiting = attach_claims([elsewhere], {"research/shared": shared})
    assert asked == {} and "asks for node h100-0" in waiting["research/a-second"]
    # two pods naming one claim not allocated yet: the first is placed, the second waits
    fresh = claim("fresh", 1)
    asked, waiting = attach_claims(
        [pod("x", "fresh"), pod("y", "fresh")], {"research/fresh": fresh}
    )
    assert list(asked) == ["research/x"]
    assert (
        waiting["research/y"].startswith("dra/claim-shared:")
        and "pod research/x" in waiting["research/y"]
    )


def test_pods_sharing_an_allocated_claim_are_evicted_together() -> None:
    """The claim's devices go back only when no pod reserves it: the view names each pod's
    partners, and an eviction of one takes the others (kube/scheduler/evictions.py)."""
    slices = slice_manifests(POLICY)
    inv = build_inventory(POLICY, nodes(), read_slices(slices))
    status = allocated("h100-1", ["gpu-2", "gpu-3"], "first")
    status["reservedFor"].append({"resource": "pods", "name": "second", "uid": "u"})
    shared = claim("shared", 2, status=status)
    alone = claim("alone", 1, status=allocated("h100-0", ["gpu-0"], "solo"))
    bound = [pod("first", "shared", node="h100-1"), pod("second", "shared", node="h100-1"),
             pod("solo", "alone", node="h100-0")]  # fmt: skip
    view = build_view(POLICY, inv, bound, "gpucarve", EPOCH, {}, claims=[shared, alone])
    assert dict(view.claim_partners) == {
        "research/first": ("research/second",), "research/second": ("research/first",)}  # fmt: skip
    assert view.evicted_with(["research/first"]) == ["research/first", "research/second"]
    assert view.evicted_with(["research/solo"]) == ["research/solo"]
