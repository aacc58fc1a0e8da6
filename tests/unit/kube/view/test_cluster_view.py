"""The scheduler's view rebuilt from API objects: nodes that disagree with the policy are
reported and kept out, bound pods hold the slices their annotation names (or the first free
ones), nothing is allocated twice, and a gang bound in part before a crash waits as `+rest`."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import Any

from gpucarve.config.policy_build import load_policy, load_policy_text
from gpucarve.core.cluster import build_cluster
from gpucarve.core.policy import Policy
from gpucarve.core.vocabulary import ASSIGNMENT_ANNOTATION as ASSIGNMENT
from gpucarve.core.workload import PartialGang
from gpucarve.devcluster.nodes import node_manifests
from gpucarve.engine.engine import run_cycle
from gpucarve.kube.view.cluster_view import build_view
from gpucarve.kube.view.nodes.inventory import MISMATCH_TAINT, build_inventory
from gpucarve.kube.view.pods.pods import GroupSpec
from tests.paths import BUILTIN

EXAMPLE = BUILTIN / "three-teams.yaml"
EPOCH = datetime(2026, 11, 29, tzinfo=UTC)
POLICY = load_policy(EXAMPLE, []).policy
TOLERATE = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def ready_nodes(policy: Policy | None = None) -> list[dict[str, Any]]:
    """The policy's Node objects (the example's by default), Ready."""
    out = []
    for m in node_manifests(policy or POLICY):
        m = copy.deepcopy(m)
        m["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
        out.append(m)
    return out


def pod(
    name: str,
    ns: str,
    limits: dict[str, str],
    node: str | None = None,
    slices: list[str] | None = None,
    group: str | None = None,
    scheduler: str = "gpucarve",
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": ns,
        "creationTimestamp": "2026-11-29T00:00:10Z",
        "labels": {"scheduling.x-k8s.io/pod-group": group} if group else {},
        "annotations": {},
    }
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "tolerations": TOLERATE,
        "containers": [{"name": "c", "resources": {"limits": limits}}],
    }
    if node:
        spec["nodeName"] = node
    if slices is not None:
        meta["annotations"][ASSIGNMENT] = json.dumps({"slices": slices})
    return {"metadata": meta, "spec": spec, "status": {"phase": "Running" if node else "Pending"}}


def test_nodes_that_disagree_with_the_policy_are_reported_and_kept_out() -> None:
    nodes = ready_nodes()
    by_name = {n["metadata"]["name"]: n for n in nodes}
    # production-1 carved differently: seven 1g.10gb per GPU instead of the policy's layout
    alloc = by_name["production-1"]["status"]["allocatable"]
    for k in [k for k in alloc if k.startswith("nvidia.com/mig-")]:
        del alloc[k]
    alloc["nvidia.com/mig-1g.10gb"] = "14"
    by_name["training-3"]["metadata"]["labels"]["nvidia.com/gpu.product"] = "NVIDIA-A100-SXM4-80GB"
    by_name["dev-5"]["metadata"]["labels"]["gpucarve.io/pool"] = "nosuch"
    by_name["dev-2"]["metadata"]["labels"]["nvidia.com/gpu.replicas"] = "4"
    stray = copy.deepcopy(by_name["dev-4"])
    stray["metadata"]["name"] = "stray"
    del stray["metadata"]["labels"]["gpucarve.io/pool"]
    nodes.append(stray)
    inv = build_inventory(POLICY, nodes)
    text = "\n".join(map(str, inv.problems))
    assert (
        "node production-1: allocatable nvidia.com/mig-1g.10gb is 14, pool production expects 4"
        in text
    )
    assert "node training-3: nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB but pool training" in text
    assert "node dev-5: label gpucarve.io/pool=nosuch names no pool" in text
    assert (
        "node dev-2: GPU Feature Discovery says nvidia.com/gpu.replicas=4, pool dev expects 8"
        in text
    )
    assert "node stray: publishes nvidia.com/gpu.shared but belongs to no pool" in text
    names = [n.name for n in inv.cluster.nodes]
    assert "dev-5" not in names and "stray" not in names
    assert MISMATCH_TAINT in inv.cluster.node("production-1").taints
    assert MISMATCH_TAINT not in inv.cluster.node("production-0").taints
    # the engine places nothing on a mismatched node
    # four pods within their queues' nominal quota, each needing a whole training node
    pending = [
        pod("r0", "research", {"nvidia.com/gpu": "8"}),
        pod("r1", "research", {"nvidia.com/gpu": "8"}),
        pod("p0", "production", {"nvidia.com/gpu": "8"}),
        pod("d0", "data-science", {"nvidia.com/gpu": "6"}),
    ]
    view = build_view(POLICY, inv, pending, "gpucarve", EPOCH, {})
    result = run_cycle(view.snapshot, 10)
    used = {p.node for a in result.admissions for p in a.pods}
    assert used == {"training-0", "training-1", "training-2"}
    (waiting,) = result.pending
    assert waiting.reason.stage == "placement"


def test_bound_pods_hold_their_slices_and_nothing_is_given_twice() -> None:
    inv = build_inventory(POLICY, ready_nodes())
    pods = [
        pod("a", "production", {"nvidia.com/mig-3g.40gb": "1"}, "production-0",
            ["production-0/gpu0/3g.40gb@4"]),
        # no annotation (bound by hand): the first free 3g.40gb of its node
        pod("b", "production", {"nvidia.com/mig-3g.40gb": "1"}, "production-0"),
        # another scheduler's pod still holds its GPUs
        pod("c", "default", {"nvidia.com/mig-3g.40gb": "1"}, "production-1",
            scheduler="default-scheduler"),
        # claims a slice already held: reported, and given the next free one
        pod("d", "production", {"nvidia.com/mig-1g.10gb": "1"}, "production-0",
            ["production-0/gpu0/3g.40gb@4"]),
    ]  # fmt: skip
    view = build_view(POLICY, inv, pods, "gpucarve", EPOCH, {})
    allocs = view.snapshot.cluster.allocations
    assert allocs["production-0/gpu0/3g.40gb@4"].owner == "production/a"
    assert allocs["production-0/gpu1/3g.40gb@4"].owner == "production/b"
    assert allocs["production-1/gpu0/3g.40gb@4"].owner == "foreign:default/c"
    d = [s for s, a in allocs.items() if a.owner == "production/d"]
    assert len(d) == 1 and "/1g.10gb@" in d[0]
    assert any("both claim production-0/gpu0/3g.40gb@4" in w for w in view.warnings)
    assert view.snapshot.check() == []
    assert {rw.workload.id for rw in view.snapshot.running} == {
        "production/a",
        "production/b",
        "production/d",
    }


def test_a_gang_bound_in_part_waits_for_the_rest_only() -> None:
    inv = build_inventory(POLICY, ready_nodes())
    pods = [
        pod("g-0", "research", {"nvidia.com/gpu": "8"}, "training-0",
            [f"training-0/gpu{i}" for i in range(8)], group="g"),
        pod("g-1", "research", {"nvidia.com/gpu": "8"}, group="g"),
        pod("g-2", "research", {"nvidia.com/gpu": "8"}, group="g"),
    ]  # fmt: skip
    view = build_view(POLICY, inv, pods, "gpucarve", EPOCH, {("research", "g"): GroupSpec(3)})
    (running,) = view.snapshot.running
    assert running.workload.id == "research/g" and len(running.pods) == 1
    (rest,) = view.snapshot.pending
    assert rest.id == "research/g+rest"
    assert rest.pod_sets[0].count == 2 and rest.pod_sets[0].min_count == 2
    # short of its minimum since its missing pods were created (t=10 s), 24 GPUs in all
    assert dict(view.snapshot.partial) == {
        "research/g": PartialGang(missing=2, since=10, gpus=24, rest="research/g+rest")
    }
    result = run_cycle(view.snapshot, 10)
    (admission,) = result.admissions
    bound = sorted(view.pod_of(admission.workload, p.pod) for p in admission.pods)
    assert bound == ["research/g-1", "research/g-2"]
    assert all(p.node != "training-0" for p in admission.pods)


def test_a_gang_short_of_its_min_member_waits_for_its_pods() -> None:
    inv = build_inventory(POLICY, ready_nodes())
    pods = [pod("g-0", "research", {"nvidia.com/gpu": "8"}, group="g")]
    view = build_view(POLICY, inv, pods, "gpucarve", EPOCH, {("research", "g"): GroupSpec(3)})
    assert view.snapshot.pending == ()
    assert "has 1 of its 3 pods" in view.invalid["research/g-0"]
    assert view.short_running == {}  # nothing of it runs: nothing to release
    bound = pod("g-1", "research", {"nvidia.com/gpu": "8"}, "training-1",
                [f"training-1/gpu{i}" for i in range(8)], group="g")  # fmt: skip
    view = build_view(POLICY, inv, [*pods, bound], "gpucarve", EPOCH,
                      {("research", "g"): GroupSpec(3)})  # fmt: skip
    assert view.short_running == {"research/g": PartialGang(missing=2, since=0, gpus=24)}
    pods += [pod(f"g-{i}", "research", {"nvidia.com/gpu": "8"}, group="g") for i in (1, 2)]
    view = build_view(POLICY, inv, pods, "gpucarve", EPOCH, {("research", "g"): GroupSpec(3)})
    (gang,) = view.snapshot.pending
    assert gang.pod_sets[0].min_count == 3 and not view.invalid


def test_a_pod_group_claiming_another_queue_or_priority_than_its_pods_waits_with_why() -> None:
    inv = build_inventory(POLICY, ready_nodes())
    pods = [pod(f"g-{i}", "research", {"nvidia.com/gpu": "8"}, group="pair") for i in range(2)]
    ok = build_view(POLICY, inv, pods, "gpucarve", EPOCH,
                    {("research", "pair"): GroupSpec(2, queue="research")})  # fmt: skip
    assert [w.id for w in ok.snapshot.pending] == ["research/pair"]
    for claim, says in (
        (("production", None), "names queue 'production' but its pods are in queue 'research'"),
        ((None, "production-critical"), "names priority class 'production-critical'"),
    ):
        spec = GroupSpec(2, queue=claim[0], priority_class=claim[1])
        v = build_view(POLICY, inv, pods, "gpucarve", EPOCH, {("research", "pair"): spec})
        assert v.snapshot.pending == ()
        assert says in v.invalid["research/g-0"] and "fix:" in v.invalid["research/g-0"]


def test_a_pod_groups_topology_and_timeout_reach_the_workload() -> None:
    inv = build_inventory(POLICY, ready_nodes())
    pods = [pod(f"g-{i}", "research", {"nvidia.com/gpu": "8"}, group="g") for i in range(2)]
    spec = GroupSpec(2, topology="rack", timeout_s=120)
    view = build_view(POLICY, inv, pods, "gpucarve", EPOCH, {("research", "g"): spec})
    (gang,) = view.snapshot.pending
    assert gang.topology == "rack" and gang.timeout_s == 120
    result = run_cycle(view.snapshot, 10)
    (admission,) = result.admissions
    labels = {n["metadata"]["name"]: n["metadata"]["labels"] for n in node_manifests(POLICY)}
    racks = {name: lab["gpucarve.io/rack"] for name, lab in labels.items() if "training" in name}
    assert len({racks[p.node] for p in admission.pods}) == 1


def test_a_pod_that_is_no_workload_says_why_in_plain_text() -> None:
    inv = build_inventory(POLICY, ready_nodes())
    lost = pod("x", "nowhere", {"nvidia.com/gpu": "1"})
    view = build_view(POLICY, inv, [lost], "gpucarve", EPOCH, {})
    message = view.invalid["nowhere/x"]
    assert message.startswith("validation/no-queue: nowhere/x.namespace: "), message
    assert "; fix: " in message and "Problem(" not in message and "Severity" not in message


def test_nodes_come_in_the_order_plan_builds_them_whatever_the_api_lists() -> None:
    # plan's order: by pool as the policy lists them, then h100-2 before h100-10; the API
    # server lists by name, which sorts neither way
    policy = load_policy_text(
        EXAMPLE.read_text().replace("nodes: 4\n", "nodes: 12\n", 1), "t"
    ).policy
    assert policy is not None
    planned = [n.name for n in build_cluster(policy).nodes]
    manifests = node_manifests(policy)
    listed = sorted(manifests, key=lambda m: m["metadata"]["name"])
    assert [m["metadata"]["name"] for m in listed] != planned, "the example sorts alike anyway"
    built = build_inventory(policy, listed).cluster.nodes
    assert [n.name for n in built] == planned


def test_a_pod_that_ran_before_the_scheduler_started_keeps_its_runtime() -> None:
    # the scheduler (re)started at EPOCH; the pod had been running for an hour by then
    inv = build_inventory(POLICY, ready_nodes())
    running = pod("old", "research", {"nvidia.com/gpu": "8"}, node="training-0")
    running["status"] = {"phase": "Running", "startTime": "2026-11-28T23:00:00Z"}
    view = build_view(POLICY, inv, [running], "gpucarve", EPOCH, {})
    (rw,) = view.snapshot.running
    assert rw.start_time == -3600  # not 0: its minimum runtime is not served again


def test_a_running_gang_whose_pod_is_gone_is_short_and_completed_pods_count() -> None:
    inv = build_inventory(POLICY, ready_nodes())
    survivor = pod("g-0", "research", {"nvidia.com/gpu": "8"}, "training-0",
                   [f"training-0/gpu{i}" for i in range(8)], group="g")  # fmt: skip
    specs = {("research", "g"): GroupSpec(2, timeout_s=20)}
    # g-1 was deleted and nothing replaced it: the survivor's gang is short, for the timeout
    view = build_view(POLICY, inv, [survivor], "gpucarve", EPOCH, specs)
    assert dict(view.short_running) == {"research/g": PartialGang(missing=1, since=0, gpus=16)}
    # g-1 completed instead: the gang is whole
    finished = pod("g-1", "research", {"nvidia.com/gpu": "8"}, "training-1", group="g")
    finished["status"] = {"phase": "Succeeded"}
    view = build_view(POLICY, inv, [survivor, finished], "gpucarve", EPOCH, specs)
    assert dict(view.short_running) == {}


def test_a_gang_that_never_gathers_says_its_timeout_passed() -> None:
    inv = build_inventory(POLICY, ready_nodes())
    pods = [pod(f"g-{i}", "research", {"nvidia.com/gpu": "1"}, group="g") for i in range(2)]
    specs = {("research", "g"): GroupSpec(3, timeout_s=5)}
    early = build_view(POLICY, inv, pods, "gpucarve", EPOCH, specs, now=12)
    assert early.invalid["research/g-0"].endswith("waiting for the rest")
    late = build_view(POLICY, inv, pods, "gpucarve", EPOCH, specs, now=40)
    message = late.invalid["research/g-0"]
    assert "has 2 of its 3 pods" in message
    assert "scheduleTimeoutSeconds (5 s) passed 25 s ago" in message


def test_a_gpu_pod_bound_elsewhere_is_charged_to_its_queue() -> None:
    inv = build_inventory(POLICY, ready_nodes())
    rogue = pod("rogue", "research", {"nvidia.com/gpu": "8"}, node="training-0",
                scheduler="default-scheduler")  # fmt: skip
    view = build_view(POLICY, inv, [rogue], "gpucarve", EPOCH, {})
    assert view.elsewhere == {"research/rogue": "research"}
    (rw,) = view.snapshot.running
    assert rw.workload.queue == "research" and not rw.workload.preemptible  # keep: never a victim
    assert [len(p.slice_ids) for p in rw.pods] == [8]
    # outside the governed namespaces it only holds its slices, as before
    free = pod("free", "elsewhere", {"nvidia.com/gpu": "8"}, node="training-0",
               scheduler="default-scheduler")  # fmt: skip
    view = build_view(POLICY, inv, [free], "gpucarve", EPOCH, {})
    assert view.elsewhere == {} and view.snapshot.running == ()
    assert len(view.snapshot.cluster.allocations) == 8


def test_a_shared_pool_advertised_under_the_other_name_gets_the_renaming_fix() -> None:
    nodes = ready_nodes()
    by_name = {n["metadata"]["name"]: n for n in nodes}
    # dev-1's device plugin runs renameByDefault: false: its 8 replicas are nvidia.com/gpu
    alloc = by_name["dev-1"]["status"]["allocatable"]
    alloc["nvidia.com/gpu"] = alloc.pop("nvidia.com/gpu.shared")
    text = "\n".join(map(str, build_inventory(POLICY, nodes).problems))
    assert "node dev-1: allocatable nvidia.com/gpu is 8 where pool dev expects" in text
    assert "set `renameByDefault: false` on the pool" in text


def test_a_coscheduling_gang_made_since_the_last_look_for_its_crd_waits_for_the_next() -> None:
    """Pods naming a coscheduling PodGroup whose CRD was not served when the scheduler last
    looked, made since that look (the CRD may have come with them), are never placed as a gang
    of the pods that exist so far: they wait for the next look. Made before a look that found
    no CRD, they are a gang of all their pods, as without an object."""
    inv = build_inventory(POLICY, ready_nodes())
    pods = [pod(f"g-{i}", "research", {"nvidia.com/gpu": "8"}, group="g") for i in range(2)]
    created = 10  # the pods' creation (00:00:10), in seconds from EPOCH
    kind = "coscheduling PodGroup"
    view = build_view(POLICY, inv, pods, "gpucarve", EPOCH, {}, unread={kind: created - 5})
    assert view.snapshot.pending == ()
    assert view.awaiting == {kind}
    assert view.invalid["research/g-0"].startswith(
        "pod-group/awaited: waiting for the scheduler to look for the coscheduling PodGroup CRD"
    )
    # a look in the second after their stamp may have come before them (a stamp is a whole
    # second, the epoch need not be): they still wait
    view = build_view(POLICY, inv, pods, "gpucarve", EPOCH, {}, unread={kind: created + 1})
    assert view.snapshot.pending == () and view.awaiting == {kind}
    # a look surely since they were made found no CRD: the gang of all its pods
    view = build_view(POLICY, inv, pods, "gpucarve", EPOCH, {}, unread={kind: created + 2})
    (w,) = view.snapshot.pending
    assert w.id == "research/g" and w.pods == 2 and view.awaiting == frozenset()
    # a look found it: its PodGroup is read and gives the size
    view = build_view(POLICY, inv, pods, "gpucarve", EPOCH, {("research", "g"): GroupSpec(3)})
    assert view.snapshot.pending == ()  # 2 of its 3: waiting for the third
    assert view.awaiting == frozenset()


def test_a_bound_pod_is_charged_to_the_queue_its_assignment_records_whatever_its_label() -> None:
    from gpucarve.kube.view.pods.assigned import Assigned, assigned_of

    inv = build_inventory(POLICY, ready_nodes())
    slices = [f"training-0/gpu{i}" for i in range(8)]
    bound = pod("held", "research", {"nvidia.com/gpu": "8"}, "training-0", slices)
    recorded = Assigned("training-0", tuple(slices), queue="research")
    bound["metadata"]["annotations"][ASSIGNMENT] = recorded.annotation()
    assert assigned_of(bound) == Assigned("training-0", tuple(slices), queue="research")
    bound["metadata"]["labels"] = {"gpucarve.io/queue": "production"}  # relabelled later
    view = build_view(POLICY, inv, [bound], "gpucarve", EPOCH, {})
    (running,) = view.snapshot.running
    assert running.workload.queue == "research"
    # an assignment written before queues were recorded: the label, unless it names a queue
    # the namespace may not use (then the namespace's own)
    bound["metadata"]["annotations"][ASSIGNMENT] = json.dumps({"slices": slices})
    view = build_view(POLICY, inv, [bound], "gpucarve", EPOCH, {})
    (running,) = view.snapshot.running
    assert running.workload.queue == "research"


def test_an_assignment_on_a_pod_of_a_namespace_no_queue_lists_is_never_trusted() -> None:
    """No webhook guards a namespace gpucarve does not govern: a pod there naming gpucarve as
    its scheduler, bound by nodeName, with a hand-written assignment, holds no slice by it
    (one asking for no GPU holds none at all)."""
    inv = build_inventory(POLICY, ready_nodes())
    slices = [f"training-0/gpu{i}" for i in range(8)]
    squatter = pod("squat", "elsewhere", {"cpu": "1"}, "training-0", slices)
    view = build_view(POLICY, inv, [squatter], "gpucarve", EPOCH, {})
    held = set(view.snapshot.cluster.allocations)
    assert not held & set(slices), sorted(held)
    # one that asks for the GPUs (gpucarve's own, say, bound before a policy change dropped
    # its namespace) keeps what it names, reported as outside the policy
    orphan = pod("kept", "elsewhere", {"nvidia.com/gpu": "8"}, "training-0", slices)
    view = build_view(POLICY, inv, [orphan], "gpucarve", EPOCH, {})
    assert set(slices) <= set(view.snapshot.cluster.allocations)
    assert "elsewhere/kept" in view.orphans
    # the same pod in a governed namespace is gpucarve's: its assignment holds the slices
    mine = pod("mine", "research", {"nvidia.com/gpu": "8"}, "training-0", slices)
    view = build_view(POLICY, inv, [mine], "gpucarve", EPOCH, {})
    assert set(slices) <= set(view.snapshot.cluster.allocations)
