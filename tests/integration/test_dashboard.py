"""The dashboard in headless Chromium against the dev cluster's real state (the scenario of
tests/unit/dashboard/test_model.py, there through the engine alone): research borrows 8 H100s beyond
its nominal 16, GPU 3 of training-0 is out of service (the health agent's annotation),
production runs a 3g.40gb instance, data science's 8-GPU pod waits. Access is decided by the
API server: the admin signs in with a token and sees everything; a research service account
sees research's workloads only and none of the cluster-wide pages."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By

from gpucarve.config.policy_build import load_policy
from gpucarve.core.vocabulary import UNHEALTHY_ANNOTATION
from gpucarve.dashboard.access import KubeAccess
from gpucarve.dashboard.server import Board, app
from gpucarve.devcluster.stack import ADMIN_USER, LocalStack, find_binaries
from gpucarve.kube.api.client import Client
from gpucarve.kube.scheduler.health import ThreadServer
from gpucarve.kube.view.nodes.inventory import build_inventory
from tests.browser import chromium, drawn, need_browser, show
from tests.integration.api import Api, wait_for
from tests.integration.kube_pods import condition, create_pod, node_of, pod, pods_in
from tests.integration.stack_setup import example_policy, namespace_reader, populate, scheduling

pytestmark = pytest.mark.integration
TEAMS = ["research", "production", "data-science"]


def _json(base: str, path: str, token: str) -> tuple[int, Any]:
    req = urllib.request.Request(base + path, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=15) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


# GPU 3 of training-0 as its agent reports it: fell off the bus (the scheduler takes it out of
# service whatever the pool's budget)
FELL_OFF = {"reason": "XID 79", "class": "fallen-off-bus", "action": "reboot", "since": 1}


@pytest.fixture
def live(tmp_path: Path) -> Iterator[tuple[str, Api, LocalStack]]:
    need_browser()
    policy_file = example_policy(tmp_path)
    with LocalStack(find_binaries(), tmp_path / "stack", policy_file) as stack:
        api = Api(stack.server, stack.tokens[ADMIN_USER])
        populate(stack, api, policy_file, TEAMS)
        status, _ = api.call(
            "PATCH",
            "/api/v1/nodes/training-0",
            {"metadata": {"annotations": {UNHEALTHY_ANNOTATION: json.dumps({"3": FELL_OFF})}}},
            "application/merge-patch+json",
        )
        assert status == 200
        with scheduling(stack, policy_file) as sched:
            board = Board()
            sched.observers.append(board.observe)
            client = Client.from_kubeconfig(stack.kubeconfig())

            def governed() -> list[str]:
                return [ns for q in sched.policy.queues for ns in q.namespaces]

            server = ThreadServer(app(board, KubeAccess(client, governed)), "127.0.0.1", 0)
            server.start()
            try:
                for i in range(3):
                    create_pod(api, pod("research", f"train{i}", "nvidia.com/gpu", 8))
                create_pod(api, pod("production", "serve", "nvidia.com/mig-3g.40gb", 1))
                wait_for(
                    lambda: (
                        all(node_of(p) for p in pods_in(api, "research").values())
                        and node_of(pods_in(api, "production")["serve"])
                    ),
                    what="research and production bound",
                )
                create_pod(api, pod("data-science", "big", "nvidia.com/gpu", 8))
                wait_for(
                    lambda: condition(pods_in(api, "data-science")["big"]),
                    what="big's reason written",
                )
                yield f"http://127.0.0.1:{server.port}", api, stack
            finally:
                server.stop()


def test_the_dashboard_shows_the_cluster_as_it_is(live: tuple[str, Api, LocalStack]) -> None:
    base, api, stack = live
    admin = stack.tokens[ADMIN_USER]
    policy = load_policy(stack.workdir.parent / "policy.yaml", []).policy
    serve_node = node_of(pods_in(api, "production")["serve"])
    assert serve_node is not None
    reason = condition(pods_in(api, "data-science")["big"])
    assert reason is not None
    with chromium() as d:
        # no token yet: the API server has nobody to ask about, the page asks for one
        d.get(f"{base}/#cluster")
        wait_for(lambda: d.find_element(By.ID, "signin").is_displayed(), what="sign-in form")
        d.find_element(By.ID, "token").send_keys(admin)
        d.find_element(By.CSS_SELECTOR, "#signin button").click()
        text = drawn(d)
        wait_for(lambda: "training" in drawn(d), what="pools drawn")
        text = drawn(d)
        row = next(line for line in text.splitlines() if line.startswith("training"))
        # pool, model, sharing, nodes, GPUs, in use, then by state: reserved, out of service,
        # changing, held outside the policy, in no MIG instance, free
        assert row.split("\t")[:12] == [
            "training", "H100-SXM5-80GB", "exclusive", "4", "32", "24", "0", "1", "0", "0", "0",
            "7",
        ]  # fmt: skip

        # a GPU out of service, drawn and said
        show(d, base, "node/training-0")
        gpu3 = d.find_element(By.CSS_SELECTOR, '[data-gpu="training-0/gpu3"]')
        assert "out of service" in gpu3.text and "XID 79" in gpu3.text
        slice3 = gpu3.find_element(By.CSS_SELECTOR, "[data-slice]")
        assert slice3.get_attribute("data-state") == "out-of-service"

        # the MIG layout drawn in the order the node holds it, the instance in use by team
        show(d, base, f"node/{serve_node}")
        # what the node publishes (its labels), read as the scheduler reads it
        held = build_inventory(policy, [api.get(f"/api/v1/nodes/{serve_node}")]).cluster
        drawn_gpus = d.find_elements(By.CSS_SELECTOR, "[data-gpu]")
        assert len(drawn_gpus) == len(held.node(serve_node).gpus) == 2
        for g, gpu in zip(drawn_gpus, held.node(serve_node).gpus, strict=True):
            profiles = [s.text for s in g.find_elements(By.CSS_SELECTOR, "[data-slice]")]
            by_start = sorted(gpu.mig_layout, key=lambda i: i.start)
            assert profiles == [i.profile for i in by_start], profiles
            assert sorted(profiles) == ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]
        used = d.find_elements(By.CSS_SELECTOR, '[data-state="used"]')
        assert [(u.text, u.get_attribute("data-team")) for u in used] == [("3g.40gb", "production")]
        assert "production/serve" in (used[0].get_attribute("title") or "")

        # research borrows 8 H100s beyond its nominal 16
        text = show(d, base, "queues")
        research = text[text.index("Queue research") : text.index("Queue production")]
        h100 = next(line for line in research.splitlines() if line.startswith("h100-full"))
        assert h100.split("\t")[:6] == ["h100-full", "slices", "16", "24", "8", "0"]

        # the waiting pod with the reason the scheduler wrote on it, and the whole chain
        text = show(d, base, "pending")
        assert "data-science/big" in text
        details = d.find_element(By.CSS_SELECTOR, '[data-workload="data-science/big"]')
        summary = details.find_element(By.TAG_NAME, "summary").text
        assert summary and summary in reason["message"]
        details.find_element(By.TAG_NAME, "summary").click()
        chain = wait_for(
            lambda: "data-science" in (t := details.find_element(By.TAG_NAME, "pre").text) and t,
            what="explain's chain fetched",
        )
        # the same chain `gpucarve explain` prints for the pod
        assert "queue data-science" in chain

        text = show(d, base, "changes")
        assert "training-0/gpu3\tfallen-off-bus: XID 79" in text


def test_a_team_member_sees_their_namespaces_only(live: tuple[str, Api, LocalStack]) -> None:
    base, api, _ = live
    token = namespace_reader(api)
    status, body = _json(base, "/api/whoami", token)
    assert status == 200 and body["namespaces"] == ["research"] and body["cluster"] is False
    assert body["name"] == "system:serviceaccount:research:alice"
    status, body = _json(base, "/api/pending", token)
    assert status == 200 and body["workloads"] == []  # data science's pod is not theirs
    status, body = _json(base, "/api/cluster", token)
    assert status == 403 and "may not list nodes" in body["message"]
    status, body = _json(base, "/api/pending", "not-a-token")
    assert status == 401 and "does not accept" in body["message"]


def test_an_explain_opened_on_a_live_scheduler_stays_open_while_cycles_run(
    live: tuple[str, Api, LocalStack],
) -> None:
    """The scheduler cycles every half second, each cycle a new generation the page redraws
    for; the chain opened on the Pending page is still open, with its text, 30 s later."""
    base, _, stack = live
    with chromium() as d:
        d.get(f"{base}/#pending")
        wait_for(lambda: d.find_element(By.ID, "signin").is_displayed(), what="sign-in form")
        d.find_element(By.ID, "token").send_keys(stack.tokens[ADMIN_USER])
        d.find_element(By.CSS_SELECTOR, "#signin button").click()
        wait_for(lambda: "data-science/big" in drawn(d), what="the pending page")
        d.find_element(By.CSS_SELECTOR, 'details[data-workload="data-science/big"] summary').click()
        chain = "return document.querySelector('details pre').textContent"
        wait_for(lambda: d.execute_script(chain).startswith("workload data-science/big"),
                 what="the chain shown")  # fmt: skip
        ready = "return Number(document.getElementById('main').dataset.readyAt)"
        first = d.execute_script(ready)
        time.sleep(30)
        assert d.execute_script(ready) > first  # redrawn meanwhile
        assert d.execute_script("return document.querySelector('details').open") is True
        assert d.execute_script(chain).startswith("workload data-science/big")
