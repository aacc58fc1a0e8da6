"""The gpucarve scheduler on a real API server with kwok nodes from the three-team example:
pods land on the right pools and slices, gangs bind all at once, a queue over quota says why,
reclaim evicts a borrower through the Eviction API."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from gpucarve.cli.main import app
from gpucarve.config.policy_build import load_policy
from gpucarve.devcluster.procs import free_port
from gpucarve.devcluster.stack import ADMIN_USER, LocalStack, find_binaries
from gpucarve.kube.api.client import Client
from gpucarve.kube.scheduler.health import Health, ProbeServer
from gpucarve.kube.scheduler.loop import Scheduler, SchedulerConfig
from gpucarve.kube.scheduler.reactions import REACTIONS, Bind, CycleReport, Decided, Parts
from tests.integration.api import Api, wait_for
from tests.integration.invariants import bound_at_once
from tests.integration.kube_pods import (
    condition,
    create_pod,
    delete_all,
    install_coscheduling_crd,
    node_of,
    planned,
    pod,
    pod_group,
    pods_in,
)
from tests.integration.stack_setup import (
    example_policy,
    populate,
    populated,
    running,
    scheduling,
    webhook_bypassed,
)
from tests.paths import BUILTIN

pytestmark = pytest.mark.integration
EXAMPLE = BUILTIN / "three-teams.yaml"
NAMESPACES = ["research", "production", "serving", "data-science", "notebooks"]


@pytest.fixture(scope="module")
def policy_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return example_policy(tmp_path_factory.mktemp("policy"))


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, policy_file: Path
) -> Iterator[tuple[LocalStack, Api]]:
    """A stack of its own (the tests fill its GPUs), with the example's nodes and queues."""
    with LocalStack(find_binaries(), tmp_path_factory.mktemp("sched"), policy_file) as stack:
        api = Api(stack.server, stack.tokens[ADMIN_USER])
        populate(stack, api, policy_file, NAMESPACES)
        yield stack, api


@pytest.fixture
def scheduler(cluster: tuple[LocalStack, Api], policy_file: Path) -> Iterator[Scheduler]:
    stack, api = cluster
    with scheduling(stack, policy_file) as sched:
        yield sched
    delete_all(api, NAMESPACES)
    wait_for(lambda: not any(pods_in(api, ns) for ns in NAMESPACES), what="pods deleted")


def _assignment(p: dict[str, Any]) -> dict[str, Any]:
    raw = p["metadata"]["annotations"]["gpucarve.io/assignment"]
    return dict(json.loads(raw))


def _bound(api: Api, ns: str, names: list[str]) -> dict[str, dict[str, Any]] | None:
    pods = pods_in(api, ns)
    if all(node_of(pods.get(n) or {}) for n in names):
        return pods
    return None


def test_pods_land_on_their_pools_and_slices(
    cluster: tuple[LocalStack, Api], scheduler: Scheduler
) -> None:
    _, api = cluster
    skipped = scheduler.skipped
    create_pod(api, pod("production", "inference", "nvidia.com/mig-3g.40gb"))
    create_pod(api, pod("production", "small", "nvidia.com/mig-1g.10gb"))
    create_pod(api, pod("research", "train", "nvidia.com/gpu", 8))
    create_pod(api, pod("notebooks", "notebook", "nvidia.com/gpu.shared"))
    prod = wait_for(lambda: _bound(api, "production", ["inference", "small"]), what="bound")
    research = wait_for(lambda: _bound(api, "research", ["train"]), what="bound")
    notebooks = wait_for(lambda: _bound(api, "notebooks", ["notebook"]), what="bound")

    inference = prod["inference"]
    assert node_of(inference).startswith("production-")
    (slice_id,) = _assignment(inference)["slices"]
    assert slice_id.startswith(node_of(inference) + "/gpu") and "/3g.40gb@" in slice_id
    (small,) = _assignment(prod["small"])["slices"]
    assert "/1g.10gb@" in small
    train = research["train"]
    assert node_of(train).startswith("training-")
    assert len(_assignment(train)["slices"]) == 8
    assert node_of(notebooks["notebook"]).startswith("dev-")
    assert condition(inference) == condition(inference) and condition(inference)["status"] == "True"
    # the watch showing the last cycle's bindings as they were made wakes no cycle
    wait_for(lambda: scheduler.skipped > skipped, what="a wake that only confirmed bindings")


def test_a_gang_waits_whole_then_binds_at_once(
    cluster: tuple[LocalStack, Api], scheduler: Scheduler
) -> None:
    _, api = cluster
    # production and data-science each hold most of one of the four training nodes.
    create_pod(api, pod("production", "hold", "nvidia.com/gpu", 8))
    create_pod(api, pod("data-science", "hold", "nvidia.com/gpu", 6))
    wait_for(lambda: _bound(api, "production", ["hold"]), what="holder bound")
    wait_for(lambda: _bound(api, "data-science", ["hold"]), what="holder bound")
    # Three pods of 6 GPUs need three nodes with 6 free: only two have.
    pod_group(api, "research", "gang", 3)
    names = [f"gang-{i}" for i in range(3)]
    for n in names:
        create_pod(api, pod("research", n, "nvidia.com/gpu", 6, group="gang"))

    def all_say_why() -> bool:
        pods = pods_in(api, "research")
        conds = [condition(pods[n]) for n in names]
        # (a cycle that saw part of the gang, or the last test's pods going, said so first)
        return all(
            c is not None and c["status"] == "False" and c["message"].startswith("placement/")
            for c in conds
        )

    wait_for(all_say_why, what="the gang's pods to say why they wait")
    pods = pods_in(api, "research")
    assert not any(node_of(pods[n]) for n in names)
    message = condition(pods["gang-0"])["message"]
    assert message.startswith("placement/") and "3 pods" in message, message
    events = api.get("/api/v1/namespaces/research/events")["items"]
    assert any(
        e["reason"] == "FailedScheduling" and e["involvedObject"]["name"] == "gang-0"
        for e in events
    )

    api.call("DELETE", "/api/v1/namespaces/data-science/pods/hold?gracePeriodSeconds=0")
    seen: list[tuple[float, int]] = []

    def gang_bound() -> bool:
        pods = pods_in(api, "research")
        seen.append((time.monotonic(), sum(1 for n in names if node_of(pods[n]))))
        return seen[-1][1] == 3

    wait_for(gang_bound, what="the whole gang bound")
    assert (why := bound_at_once(seen, 3)) is None, f"the gang: {why}"
    nodes = {node_of(pods_in(api, "research")[n]) for n in names}
    assert len(nodes) == 3


def test_a_queue_over_quota_waits_and_says_why(
    cluster: tuple[LocalStack, Api], scheduler: Scheduler
) -> None:
    _, api = cluster
    # data-science may hold 6 H100s and borrow 10 more: 8 + 8 + 4 is over that.
    for name in ("first", "second"):
        create_pod(api, pod("data-science", name, "nvidia.com/gpu", 8))
    wait_for(lambda: _bound(api, "data-science", ["first", "second"]), what="two bound")
    create_pod(api, pod("data-science", "third", "nvidia.com/gpu", 4))

    def says_quota() -> str | None:
        c = condition(pods_in(api, "data-science")["third"])
        return c["message"] if c and c["status"] == "False" else None

    message = wait_for(says_quota, what="the quota reason")
    assert message.startswith("quota/")
    assert "data-science" in message and "borrowing limit 10" in message
    assert not node_of(pods_in(api, "data-science")["third"])

    def queue_status() -> dict[str, Any] | None:
        status = api.get("/apis/gpucarve.io/v1alpha1/queues/data-science").get("status")
        return status if status and status.get("pendingWorkloads") == 1 else None

    status = wait_for(queue_status, what="the queue's status")
    assert status["admittedWorkloads"] == 2
    assert status["usage"] == {"h100-full": 16}
    assert status["borrowed"] == {"h100-full": 10}


def test_reclaim_evicts_a_borrower_through_the_api(
    cluster: tuple[LocalStack, Api], scheduler: Scheduler
) -> None:
    _, api = cluster
    stepped = scheduler.stepped
    # research borrows 8 H100s beyond its 16; data-science fills the rest.
    research = [f"r-{i}" for i in range(3)]
    for n in research:
        create_pod(api, pod("research", n, "nvidia.com/gpu", 8))
    create_pod(api, pod("data-science", "ds", "nvidia.com/gpu", 6))
    wait_for(lambda: _bound(api, "research", research), what="research bound")
    wait_for(lambda: _bound(api, "data-science", ["ds"]), what="data-science bound")
    # production asks for 8 of its own nominal 10: the cohort must give them back.
    create_pod(api, pod("production", "own", "nvidia.com/gpu", 8))
    wait_for(lambda: _bound(api, "production", ["own"]), what="production bound")
    left = pods_in(api, "research")
    assert len(left) == 2, sorted(left)
    events = api.get("/api/v1/namespaces/research/events")["items"]
    preempted = [e for e in events if e["reason"] == "Preempted"]
    assert preempted and "reclaimed by queue production" in preempted[0]["message"]
    # the engine followed views by their step (each checked against a fresh index)
    assert scheduler.stepped > stepped


def test_a_pod_deleted_while_being_scheduled_is_let_go(
    cluster: tuple[LocalStack, Api], policy_file: Path
) -> None:
    stack, api = cluster
    sched = Scheduler(
        Client.from_kubeconfig(stack.kubeconfig()), load_policy(policy_file, []).policy
    )
    sched.start()
    try:
        create_pod(api, pod("notebooks", "gone", "nvidia.com/gpu.shared"))
        wait_for(lambda: sched.pods.get("notebooks/gone"), what="the pod in the cache")
        view = sched.view()
        result = sched.engine.run_cycle(view.snapshot, 0)
        assert [a.workload for a in result.admissions] == ["notebooks/gone"]
        # deleted between the decision and the binding
        api.call("DELETE", "/api/v1/namespaces/notebooks/pods/gone?gracePeriodSeconds=0")
        Bind().react(sched, Decided(view, view.snapshot, result, {}, 0.0, CycleReport(0)))
        wait_for(lambda: sched.failed_binds, what="the failed binding")
        assert "notebooks/gone" in sched.failed_binds[0] and "404" in sched.failed_binds[0]
        wait_for(lambda: sched.pods.get("notebooks/gone") is None, what="the deletion seen")
        assert "notebooks/gone" not in sched.assumed
        assert sched.cycle().bound == 0  # the next cycle goes on without it
    finally:
        sched.stop()


class Recorded:
    """A reaction added by a test: one class and a list entry, nothing else touched."""

    def __init__(self) -> None:
        self.bound: list[tuple[int, list[str]]] = []

    def react(self, s: Parts, d: Decided) -> None:
        admitted = [a.workload for a in d.result.admissions]
        if admitted:
            self.bound.append((d.report.bound, admitted))


def test_a_reaction_added_to_the_list_sees_each_cycle_after_the_bindings(
    cluster: tuple[LocalStack, Api], policy_file: Path
) -> None:
    stack, api = cluster
    recorded = Recorded()
    sched = Scheduler(
        Client.from_kubeconfig(stack.kubeconfig()),
        load_policy(policy_file, []).policy,
        reactions=(*REACTIONS, recorded),
    )
    with running(sched):
        create_pod(api, pod("notebooks", "seen", "nvidia.com/gpu.shared"))
        wait_for(lambda: recorded.bound, what="the reaction told of the admission")
        # after the bindings: the report it reads says the pod was bound
        assert recorded.bound[0] == (1, ["notebooks/seen"])
        wait_for(lambda: node_of(pods_in(api, "notebooks").get("seen") or {}), what="bound")
    delete_all(api, NAMESPACES)
    wait_for(lambda: not any(pods_in(api, ns) for ns in NAMESPACES), what="pods deleted")


def test_a_queue_label_of_another_team_is_refused_with_the_reason(
    cluster: tuple[LocalStack, Api], scheduler: Scheduler
) -> None:
    _, api = cluster
    escape = pod("research", "escape", "nvidia.com/gpu", 8)
    escape["metadata"]["labels"]["gpucarve.io/queue"] = "production"
    # as shipped, the webhook refuses it at creation with the scheduler's own reason
    status, body = api.call("POST", "/api/v1/namespaces/research/pods", escape)
    assert status == 403, body
    assert "namespace 'research' may not use queue 'production'" in body["message"]
    with webhook_bypassed(api, "research", "a pod that got past admission: the scheduler's reason"):
        create_pod(api, escape)
    create_pod(api, pod("research", "honest", "nvidia.com/gpu", 8))
    wait_for(lambda: _bound(api, "research", ["honest"]), what="the pod without the label bound")

    def refused() -> str | None:
        c = condition(pods_in(api, "research")["escape"])
        return c["message"] if c and c["status"] == "False" else None

    message = wait_for(refused, what="the escape's reason")
    assert "namespace 'research' may not use queue 'production'" in message
    assert not node_of(pods_in(api, "research")["escape"])


def test_metrics_scraped_after_a_scenario_match_it(
    cluster: tuple[LocalStack, Api], scheduler: Scheduler
) -> None:
    _, api = cluster
    port = free_port()
    probes = ProbeServer(Health(), "127.0.0.1", port, scheduler.metrics.registry)
    probes.start()
    try:
        pod_group(api, "research", "pair", 2)
        for n in ("p0", "p1"):
            create_pod(api, pod("research", n, "nvidia.com/gpu", 8, group="pair"))
        wait_for(lambda: _bound(api, "research", ["p0", "p1"]), what="the gang bound")
        for name in ("first", "second"):
            create_pod(api, pod("data-science", name, "nvidia.com/gpu", 8))
        create_pod(api, pod("data-science", "third", "nvidia.com/gpu", 8))

        def scraped() -> dict[tuple[str, tuple[tuple[str, str], ...]], float] | None:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                assert r.headers["Content-Type"].startswith("text/plain")
                text = r.read().decode()
            got = {
                (s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(text)
                for s in family.samples
            }
            waiting = (
                "gpucarve_pending_workloads",
                (("queue", "data-science"), ("reason", "quota")),
            )
            return got if got.get(waiting) == 1 else None

        got = wait_for(scraped, what="the metrics to show data-science waiting on quota")
    finally:
        probes.stop()

    def at(name: str, **labels: str) -> float:
        return got[(name, tuple(sorted(labels.items())))]

    # research 16 of its 16 nominal; data-science 16 = 6 nominal + 10 borrowed (its limit)
    assert at("gpucarve_queue_usage_slices", queue="research", flavor="h100-full") == 16
    assert at("gpucarve_queue_usage_slices", queue="data-science", flavor="h100-full") == 16
    assert at("gpucarve_queue_borrowed_slices", queue="data-science", flavor="h100-full") == 10
    # what data-science borrows comes out of production's unused 10
    assert at("gpucarve_queue_lent_slices", queue="production", flavor="h100-full") == 10
    assert at("gpucarve_gang_admissions_total", queue="research", first_try="true") == 1
    assert at("gpucarve_admission_wait_seconds_count", queue="data-science") == 2
    assert at("gpucarve_binding_duration_seconds_count") >= 4
    assert at("gpucarve_leader") == 1
    assert at("gpucarve_pool_slices", pool="training", flavor="h100-full", state="allocated") == 32
    assert at("gpucarve_cycle_duration_seconds_count") >= 1


def test_a_selector_no_node_matches_says_it_can_never_fit_in_every_layer(
    cluster: tuple[LocalStack, Api], scheduler: Scheduler, policy_file: Path
) -> None:
    stack, api = cluster
    # the product name the public guides use; GFD publishes NVIDIA-H100-80GB-HBM3
    wrong = pod("research", "guide", "nvidia.com/gpu", 1)
    wrong["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": "H100-SXM5-80GB"}
    create_pod(api, wrong)

    def said() -> str | None:
        c = condition(pods_in(api, "research")["guide"])
        return c["message"] if c and c["status"] == "False" else None

    message = wait_for(said, what="the pending reason")
    assert "can never be admitted" in message, message
    assert "did you mean nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3?" in message, message
    events = api.get("/api/v1/namespaces/research/events")["items"]
    assert any("did you mean" in e.get("message", "") for e in events
               if e["involvedObject"]["name"] == "guide")  # fmt: skip
    args = ["explain", "research/guide", "--policy", str(policy_file),
            "--kubeconfig", str(stack.kubeconfig())]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "did you mean nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3?" in result.stdout
    assert not node_of(pods_in(api, "research")["guide"])


def test_ored_affinity_terms_place_where_kube_scheduler_would(
    cluster: tuple[LocalStack, Api], scheduler: Scheduler
) -> None:
    _, api = cluster
    p = pod("research", "either", "nvidia.com/gpu", 1)
    terms = [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["mars"]}]},
        {"matchExpressions": [
            {"key": "nvidia.com/gpu.memory", "operator": "Gt", "values": ["40000"]}]},
    ]  # fmt: skip
    required = {"nodeSelectorTerms": terms}
    p["spec"]["affinity"] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}
    }
    create_pod(api, p)
    bound = wait_for(lambda: _bound(api, "research", ["either"]), what="the ORed pod bound")
    node = api.get(f"/api/v1/nodes/{node_of(bound['either'])}")
    # the second term holds there (kube-scheduler ORs terms: any one that holds admits a node)
    assert int(node["metadata"]["labels"]["nvidia.com/gpu.memory"]) > 40000


def test_a_crd_installed_while_the_scheduler_runs_is_read(
    cluster: tuple[LocalStack, Api], policy_file: Path
) -> None:
    stack, api = cluster
    sched = Scheduler(
        Client.from_kubeconfig(stack.kubeconfig()),
        load_policy(policy_file, []).policy,
        SchedulerConfig(interval_s=0.3, discover_s=0.5),
    )
    with running(sched):
        wait_for(lambda: sched.cycles > 0, what="a cycle")
        assert "coscheduling PodGroup" not in sched.served  # no CRD at start
        install_coscheduling_crd(api)
        wait_for(lambda: "coscheduling PodGroup" in sched.served, what="the CRD found")
        pod_group(api, "research", "late", 3, group="scheduling.x-k8s.io")
        for i in range(2):
            create_pod(api, pod("research", f"late-{i}", "nvidia.com/gpu", 4, group="late"))

        def waits() -> str | None:
            c = condition(pods_in(api, "research").get("late-0") or {})
            message = c.get("message", "") if c else ""
            # a cycle may have seen the first pod alone: its reason said so, then changed
            return message if "has 2 of its 3 pods" in message else None

        # its minMember holds: the two pods wait for the third instead of running short
        assert "(minMember)" in wait_for(waits, what="the gang's reason")
        assert not any(node_of(p) for p in pods_in(api, "research").values())
    delete_all(api, NAMESPACES)
    wait_for(lambda: not any(pods_in(api, ns) for ns in NAMESPACES), what="pods deleted")


def test_a_gang_made_before_its_crd_is_discovered_waits_whole_and_is_found_soon(
    tmp_path: Path, policy_file: Path
) -> None:
    """The coscheduling CRD installed while the scheduler runs, and a gang of it created at
    once, before the scheduler's next look for CRDs (30 s by default): its pods wait for their
    PodGroup, never bound in part, and the scheduler looks again within seconds because they
    wait (a stack of its own: the CRD must be new to it)."""
    with populated(tmp_path, policy_file, NAMESPACES) as (stack, api, _):
        _early_gang(stack, api, policy_file)


def _early_gang(stack: LocalStack, api: Api, policy_file: Path) -> None:
    sched = Scheduler(
        Client.from_kubeconfig(stack.kubeconfig()),
        load_policy(policy_file, []).policy,
        SchedulerConfig(interval_s=0.3),  # discover_s as shipped
    )
    with running(sched):
        wait_for(lambda: sched.cycles > 0, what="a cycle")
        assert "coscheduling PodGroup" not in sched.served  # no CRD at start
        install_coscheduling_crd(api)
        for i in range(2):
            create_pod(api, pod("research", f"early-{i}", "nvidia.com/gpu", 4, group="early"))

        def awaited() -> str | None:
            c = condition(pods_in(api, "research").get("early-0") or {})
            message = c.get("message", "") if c else ""
            return message if "pod-group/awaited" in message else None

        said = wait_for(awaited, what="the pods waiting for their PodGroup")
        assert "coscheduling PodGroup CRD (research/early may be one)" in said, said
        assert not any(node_of(p) for p in pods_in(api, "research").values())
        started = time.monotonic()
        wait_for(lambda: "coscheduling PodGroup" in sched.served, timeout_s=15,
                 what="the CRD found while pods wait for it")  # fmt: skip
        assert time.monotonic() - started < 15
        pod_group(api, "research", "early", 2, group="scheduling.x-k8s.io")
        bound = wait_for(lambda: _bound(api, "research", ["early-0", "early-1"]),
                         what="the whole gang bound")  # fmt: skip
        assert len(bound) == 2


def _rogue(name: str) -> dict[str, Any]:
    """A GPU pod bound past gpucarve: nodeName at creation (the webhook refuses it: made while
    it is away, `create_rogue`)."""
    p = pod("research", name, "nvidia.com/gpu", 8, scheduler="default-scheduler")
    p["spec"]["nodeName"] = "training-0"
    return p


ROGUE = "a GPU pod another scheduler bound past the queue: what gpucarve does about it"


def create_rogue(api: Api, name: str) -> None:
    status, _ = api.call("POST", "/api/v1/namespaces/research/pods", _rogue(name))
    assert status == 403  # as shipped: nodeName skips the queue
    with webhook_bypassed(api, "research", ROGUE):
        create_pod(api, _rogue(name))


def test_a_gpu_pod_bound_elsewhere_is_charged_reported_once_and_kept(
    cluster: tuple[LocalStack, Api], scheduler: Scheduler
) -> None:
    _, api = cluster
    create_rogue(api, "rogue")

    def charged() -> dict[str, Any] | None:
        status = api.get("/apis/gpucarve.io/v1alpha1/queues/research").get("status") or {}
        return status if (status.get("usage") or {}).get("h100-full") == 8 else None

    stepped = scheduler.stepped
    wait_for(charged, what="its GPUs charged to research")
    start = scheduler.cycles
    wait_for(lambda: scheduler.cycles > start + 3, what="more cycles")
    assert scheduler.stepped > stepped  # a charged pod is no kept gang's: still followed
    events = api.get("/api/v1/namespaces/research/events")["items"]
    said = [
        e
        for e in events
        if e["involvedObject"]["name"] == "rogue" and e["reason"] == "BoundElsewhere"
    ]
    assert len(said) == 1 and said[0].get("count", 1) == 1, said
    assert "charged to queue research" in said[0]["message"]
    assert "rogue" in pods_in(api, "research")  # kept


def test_under_evict_a_gpu_pod_bound_elsewhere_is_evicted(
    cluster: tuple[LocalStack, Api], policy_file: Path, tmp_path: Path
) -> None:
    stack, api = cluster
    doc = yaml.safe_load(policy_file.read_text())
    doc["scheduling"]["boundElsewhere"] = "evict"
    evicting = tmp_path / "evict.yaml"
    evicting.write_text(yaml.safe_dump(doc))
    create_rogue(api, "rogue-2")
    with scheduling(stack, evicting):
        wait_for(lambda: "rogue-2" not in pods_in(api, "research"), what="it evicted")
    delete_all(api, NAMESPACES)
    wait_for(lambda: not any(pods_in(api, ns) for ns in NAMESPACES), what="pods deleted")


def test_preferred_affinity_puts_the_pod_in_the_rack_it_prefers(
    cluster: tuple[LocalStack, Api], scheduler: Scheduler
) -> None:
    _, api = cluster
    p = pod("research", "near", "nvidia.com/gpu", 1)
    term = {"matchExpressions": [
        {"key": "gpucarve.io/rack", "operator": "In", "values": ["training-rack1"]}]}  # fmt: skip
    preferred = [{"weight": 40, "preference": term}]
    p["spec"]["affinity"] = {
        "nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": preferred}
    }
    create_pod(api, p)
    bound = wait_for(lambda: _bound(api, "research", ["near"]), what="the pod bound")
    assert node_of(bound["near"]) in ("training-2", "training-3")


def test_a_cycle_places_its_budget_of_pods_and_the_rest_say_they_wait_their_turn(
    cluster: tuple[LocalStack, Api], tmp_path: Path
) -> None:
    """scheduling.maxPodsPerCycle on the API server: six one-GPU pods under a budget of two
    are bound two a cycle; the four not tried say so on the pod, and ask for the next cycle at
    once (`CycleStats.deferred`); `plan` of the same scenario places all six."""
    stack, api = cluster
    path = example_policy(tmp_path)
    doc = yaml.safe_load(path.read_text())
    doc["scheduling"]["maxPodsPerCycle"] = 2
    path.write_text(yaml.safe_dump(doc))
    policy = load_policy(path, []).policy
    sched = Scheduler(
        Client.from_kubeconfig(stack.kubeconfig()),
        policy,
        SchedulerConfig(interval_s=600, check_invariants=True),
    )
    names = [f"budget-{i}" for i in range(6)]
    try:
        for name in names:
            create_pod(api, pod("research", name, "nvidia.com/gpu"))
        sched.start()
        wait_for(lambda: len([p for p in sched.pods.items() if p["metadata"]["name"] in names])
                 == 6, what="pods in the informer")  # fmt: skip
        first = sched.cycle()
        assert first.bound == 2
        wait_for(lambda: len(_budget_messages(api)) == 4, what="the untried pods' reason")
        bound = 2
        for _ in range(4):
            if bound == 6:
                break
            bound += sched.cycle().bound
        assert bound == 6
        wait_for(lambda: _bound(api, "research", names), what="all six bound")
        # plan, on the same scenario and policy, answers for all six in one go
        assert sorted(planned(path, "research", names, "nvidia.com/gpu")) == sorted(names)
    finally:
        sched.stop()
        delete_all(api, NAMESPACES)
        wait_for(lambda: not any(pods_in(api, ns) for ns in NAMESPACES), what="pods deleted")


def _budget_messages(api: Api) -> list[str]:
    return [
        n
        for n, p in pods_in(api, "research").items()
        if "cycle-budget" in ((condition(p) or {}).get("message") or "")
    ]
