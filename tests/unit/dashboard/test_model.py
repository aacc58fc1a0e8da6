"""The dashboard's pictures and API from an engine cycle (the same scenario the browser test
runs on the real API server): research borrows 8 H100s beyond its nominal 16, a GPU of
training-0 is out of service, production runs a 3g.40gb instance, and data science's 8-GPU job
waits. Served over HTTP by the dashboard's own server."""

from __future__ import annotations

import dataclasses
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from gpucarve.config.examples import POLICY, example_path
from gpucarve.config.policy_build import load_policy
from gpucarve.core.cluster import Allocation, build_cluster
from gpucarve.core.policy import Policy
from gpucarve.core.snapshot import Snapshot
from gpucarve.dashboard import model
from gpucarve.dashboard.access import Denied, Open
from gpucarve.dashboard.model import Frame, Viewer
from gpucarve.dashboard.server import Board, Pages, app
from gpucarve.engine import run_cycle
from gpucarve.engine.apply import apply
from gpucarve.engine.decisions import Cause, Eviction, Reservation
from gpucarve.kube.scheduler.health import ThreadServer
from tests.engine.builders import workload

TOLERATE = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
OUT = "training-0/gpu3"


def _policy() -> Policy:
    return load_policy(example_path(POLICY)).policy


def scenario() -> Frame:
    p = _policy()
    cluster = build_cluster(p)
    gpu = cluster.node("training-0").gpus[3]
    held = {
        sid: Allocation(sid, f"unhealthy:{OUT}", s.compute_milli, s.memory_mib)
        for sid in gpu.slice_ids
        for s in [cluster.slices[sid]]
    }
    cluster = cluster.with_allocations(held)
    first = [
        workload(p, f"train{i}", "research", gpus=8, tolerations=TOLERATE) for i in range(3)
    ] + [workload(p, "serve", "production", mig="3g.40gb", tolerations=TOLERATE)]
    s = Snapshot(p, cluster, (), tuple(first))
    s = apply(s, run_cycle(s, 0))
    assert len(s.running) == 4
    late = workload(p, "big", "data-science", gpus=8, tolerations=TOLERATE, submit=10)
    s = Snapshot(p, s.cluster, s.running, (late,))
    result = run_cycle(s, 60)
    return Frame(s, result, {OUT: "XID 79"})


def test_pools_add_up_to_their_gpus_by_team_and_state() -> None:
    body = model.cluster(scenario())
    training = next(p for p in body["pools"] if p["name"] == "training")
    assert training["gpus"] == 32 and training["nodes"] == 4
    assert training["teams"] == {"research": 24}
    assert training["states"] == {"free": 7, "out-of-service": 1, "used": 24}
    production = next(p for p in body["pools"] if p["name"] == "production")
    assert abs(sum(production["states"].values()) - production["gpus"]) < 1e-6
    assert production["teams"] == {"production": 0.5}  # 3g.40gb: 4 of 8 memory slices


def test_a_mig_gpu_is_drawn_in_its_placement_order_and_a_failed_gpu_says_why() -> None:
    frame = scenario()
    node = model.node(frame, model.EVERYONE, "production-0")
    assert node is not None
    gpu0 = node["gpus"][0]
    held = sorted(frame.snapshot.cluster.node("production-0").gpus[0].mig_layout)
    assert [(s["label"], s["start"]) for s in gpu0["slices"]] == [
        (i.profile, i.start) for i in sorted(held, key=lambda i: i.start)
    ]
    assert sorted(s["label"] for s in gpu0["slices"]) == [
        "1g.10gb",
        "1g.10gb",
        "2g.20gb",
        "3g.40gb",
    ]
    assert sum(s["share"] for s in gpu0["slices"]) == pytest.approx(1.0)
    used = [s for g in node["gpus"] for s in g["slices"] if s["state"] == "used"]
    assert [(s["label"], s["team"], s["workload"]) for s in used] == [
        ("3g.40gb", "production", "production/serve")
    ]
    training = model.node(frame, model.EVERYONE, "training-0")
    assert training is not None
    assert training["gpus"][3]["outOfService"] == "XID 79"
    assert training["gpus"][3]["slices"][0]["state"] == "out-of-service"


def test_queues_show_what_research_borrows_and_the_others_lend() -> None:
    body = model.queues(scenario())
    rows = {q["name"]: {r["key"]: r for r in q["quota"]} for q in body["queues"]}
    research = rows["research"]["h100-full"]
    assert (research["nominal"], research["used"], research["borrowed"]) == (16, 24, 8)
    # production (10 nominal, none used) and data science (6) lend the 8 research borrows, in
    # proportion to what each could lend: 5 and 3 (not 8 each: what is lent adds up)
    assert rows["production"]["h100-full"]["lent"] == 5
    assert rows["data-science"]["h100-full"]["lent"] == 3
    assert rows["production"]["h100-full"]["borrowed"] == 0
    # limits as the policy sets them, none where it sets none (not 0, not a sentinel)
    assert (research["borrowingLimit"], research["lendingLimit"]) == (16, None)
    assert (rows["production"]["h100-full"]["borrowingLimit"],
            rows["production"]["h100-full"]["lendingLimit"]) == (None, 10)  # fmt: skip
    for key in {k for r in rows.values() for k in r}:
        lent = sum(r[key]["lent"] for r in rows.values() if key in r)
        borrowed = sum(r[key]["borrowed"] for r in rows.values() if key in r)
        assert lent == borrowed, key


def test_pending_carries_explains_chain_and_hides_other_namespaces() -> None:
    frame = scenario()
    body = model.pending(frame, model.EVERYONE)
    (w,) = body["workloads"]
    assert w["workload"] == "data-science/big" and w["queue"] == "data-science"
    assert w["reason"] == frame.result.pending_reason("data-science/big").message  # type: ignore[union-attr]
    lines = model.explain_lines(frame, model.EVERYONE, "data-science/big")
    assert lines is not None and any("data-science" in line for line in lines)
    stranger = Viewer("someone", cluster=False, namespaces=frozenset({"research"}))
    assert model.pending(frame, stranger)["workloads"] == []
    assert model.explain_lines(frame, stranger, "data-science/big") is None
    node = model.node(frame, stranger, "production-0")
    assert node is not None
    used = [s for g in node["gpus"] for s in g["slices"] if s["state"] == "used"]
    assert used and "workload" not in used[0] and used[0]["team"] == "production"


class OnlyResearch:
    """An access decision as the API server would make it for a research user."""

    def viewer(self, authorization: str | None) -> Viewer:
        if authorization != "Bearer research":
            raise Denied(401, "the API server does not accept this token")
        return Viewer("alice", cluster=False, namespaces=frozenset({"research"}))


@pytest.fixture
def served() -> Iterator[tuple[str, Board]]:
    board = Board()
    server = ThreadServer(app(board, OnlyResearch()), "127.0.0.1", 0, "dashboard")
    server.start()
    try:
        yield f"http://127.0.0.1:{server.port}", board
    finally:
        server.stop()


def _get(url: str, token: str | None = None) -> tuple[int, Any, dict[str, str]]:
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read() or b"null"), dict(r.headers)
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"null"), dict(err.headers)


def headers_of(url: str) -> dict[str, str]:
    return {k.lower(): v for k, v in _get(url)[2].items()}


def test_the_api_asks_who_before_what_and_answers_only_what_they_may_see(
    served: tuple[str, Board],
) -> None:
    base, board = served
    status, body, _ = _get(f"{base}/api/pending")
    assert status == 401 and "token" in body["message"]
    assert headers_of(f"{base}/api/pending")["x-content-type-options"] == "nosniff"
    status, body, _ = _get(f"{base}/api/pending", "research")
    assert status == 503 and "not finished a cycle" in body["message"]
    board.show(scenario(), datetime(2026, 12, 3, tzinfo=UTC).isoformat())
    status, body, headers = _get(f"{base}/api/pending", "research")
    assert status == 200 and body["workloads"] == [] and body["generation"] == 1
    assert "default-src 'self'" in headers["content-security-policy"]
    status, body, _ = _get(f"{base}/api/cluster", "research")
    assert status == 403 and "may not list nodes" in body["message"]
    with urllib.request.urlopen(f"{base}/", timeout=10) as r:
        page = r.read().decode()
    assert '<script type="module" src="/static/app.js">' in page
    with urllib.request.urlopen(f"{base}/static/app.js", timeout=10) as r:
        script = r.read().decode()
        assert "default-src 'self'" in r.headers["content-security-policy"]  # every answer
    # tenants name their workloads: the page never parses them as markup
    assert "innerHTML" not in script and "insertAdjacentHTML" not in script


def test_everything_open_behind_port_forward() -> None:
    board = Board()
    server = ThreadServer(app(board, Open()), "127.0.0.1", 0, "dashboard")
    server.start()
    try:
        base = f"http://127.0.0.1:{server.port}"
        board.show(scenario(), datetime(2026, 12, 3, tzinfo=UTC).isoformat())
        status, body, _ = _get(f"{base}/api/pools/training")
        assert status == 200 and body["total"] == 4
        assert body["nodes"][0]["gpus"][3]["outOfService"] == "XID 79"
        status, body, _ = _get(f"{base}/api/pools/nope")
        assert status == 404 and "no pool 'nope'" in body["message"]
        status, body, _ = _get(f"{base}/api/pools/training?offset=x")
        assert status == 400
        status, body, _ = _get(f"{base}/api/pending")
        assert [w["workload"] for w in body["workloads"]] == ["data-science/big"]
        status, body, _ = _get(f"{base}/api/explain?workload=data-science/big")
        assert status == 200 and body["explain"][0].startswith("workload data-science/big")
        status, body, _ = _get(f"{base}/api/explain?workload=research/none")
        assert status == 404
        first = scenario()
        later = Frame(first.snapshot, dataclasses.replace(first.result, now=660), first.unhealthy)
        board.show(later, datetime(2026, 12, 3, 0, 10, tzinfo=UTC).isoformat())
        status, body, _ = _get(f"{base}/api/idle")
        # the first frame's 7 free H100s, held for the 600 s until the next cycle
        assert body["now"]["training"] == {"gang-larger-than-free": 7}
        assert body["gpuHours"]["training"] == {
            "gang-larger-than-free": pytest.approx(7 / 6, abs=1e-4)
        }
    finally:
        server.stop()


def test_gpus_changing_layout_and_nodes_kept_for_a_gang_are_drawn_so() -> None:
    first = scenario()
    held = Reservation("research/pretrain", "research", 7200, ("training-0",), ("research/x",))
    result = dataclasses.replace(first.result, reservations=(held,))
    frame = Frame(first.snapshot, result, first.unhealthy, frozenset({"production-7/gpu1"}))
    changing = model.node(frame, model.EVERYONE, "production-7")
    assert changing is not None and changing["gpus"][1]["reconfiguring"] is True
    assert {s["state"] for s in changing["gpus"][1]["slices"]} == {"reconfiguring"}
    assert {s["state"] for s in changing["gpus"][0]["slices"]} == {"free"}
    kept = model.node(frame, model.EVERYONE, "training-0")
    assert kept is not None and kept["reservedFor"] == "research/pretrain"
    states = [g["slices"][0]["state"] for g in kept["gpus"]]
    assert states == ["reserved"] * 3 + ["out-of-service"] + ["reserved"] * 4
    stranger = Viewer("someone", cluster=True, namespaces=frozenset({"production"}))
    hidden = model.node(frame, stranger, "training-0")
    assert hidden is not None and hidden["reservedFor"] is None
    pools = {p["name"]: p for p in model.cluster(frame)["pools"]}
    assert pools["training"]["states"]["reserved"] == 7
    assert pools["production"]["states"]["reconfiguring"] == 1


def test_an_eviction_is_listed_with_the_work_it_destroyed_and_names_only_for_who_may_see() -> None:
    first = scenario()
    gone = Eviction(
        "research/train0", "research", Cause.RECLAIM, "data-science/big",
        "reclaimed by queue data-science for data-science/big: queue research was borrowing",
    )  # fmt: skip
    board = Board()
    board.show(Frame(first.snapshot, dataclasses.replace(first.result, evictions=(gone,))), "t1")
    gen, frame, at = board.latest() or (0, first, "")
    status, body = Pages(board).changes({}, model.EVERYONE, gen, frame, at)
    assert status == 200
    (event,) = body["events"]
    # 8 H100s since its start at 0, evicted at 60 s
    assert event["gpuHoursLost"] == pytest.approx(8 * 60 / 3600, abs=1e-3)
    assert (event["kind"], event["workload"], event["by"]) == (
        "reclaim", "research/train0", "data-science/big",
    )  # fmt: skip
    research = Viewer("alice", cluster=True, namespaces=frozenset({"research"}))
    _, body = Pages(board).changes({}, research, gen, frame, at)
    (event,) = body["events"]
    assert event["workload"] == "research/train0"
    assert event["by"] == event["message"] == "(not yours to see)"


def test_a_queues_standing_counts_what_it_borrowed_recently_with_a_half_life() -> None:
    from tests.engine.builders import cycle, policy, pool, queue, submit, workload
    from tests.engine.builders import snapshot as fresh

    def standing(half_life: int | None) -> dict[str, Any]:
        extra = {} if half_life is None else {"usageHalfLifeSeconds": half_life}
        p = policy(
            pools=[pool("train", "H100-SXM5-80GB", 2, 8)],
            cohorts=[{"name": "c"}],
            queues=[
                queue("a", {"h100-full": {"nominal": 8}}, cohort="c"),
                queue("b", {"h100-full": {"nominal": 8}}, cohort="c"),
            ],
            scheduling={"minRuntimeSeconds": 0, **extra},
        )
        _, s = cycle(fresh(p, [workload(p, "big", "a", gpus=8, pods=2)]), 0)
        s = submit(s, workload(p, "next", "b", gpus=8, pods=2, submit=3600))
        return {q["name"]: q for q in model.queues(Frame(s, run_cycle(s, 3600)))["queues"]}

    plain = standing(None)
    assert plain["a"]["recentBorrowedShare"] is None and plain["a"]["fairShare"] == 0.5
    timed = standing(3600)
    # half the cohort borrowed for one half-life: a quarter, on top of the half it borrows now
    assert timed["a"]["recentBorrowedShare"] == 0.25 and timed["a"]["fairShare"] == 0.75
    assert timed["b"]["recentBorrowedShare"] == 0


def tree_frame() -> Frame:
    """Department ml (research, science, 2 H100s of its own) in company beside batch, which
    runs 24: 14 past its own, drawn from what ml lends."""
    from tests.engine.builders import cycle, policy, pool, queue, workload
    from tests.engine.builders import snapshot as fresh

    p = policy(
        pools=[pool("train", "H100-SXM5-80GB", 4, 8)],
        cohorts=[
            {"name": "company"},
            {"name": "ml", "parent": "company", "quota": {"h100-full": {"nominal": 2}}},
        ],
        queues=[
            queue("research", {"h100-full": {"nominal": 16}}, cohort="ml"),
            queue("science", {"h100-full": {"nominal": 4}}, cohort="ml"),
            queue("batch", {"h100-full": {"nominal": 10}}, cohort="company"),
        ],
        scheduling={"minRuntimeSeconds": 0},
    )
    _, s = cycle(fresh(p, [workload(p, "wide", "batch", gpus=8, pods=3)]), 0)
    return Frame(s, run_cycle(s, 60))


def test_a_cohort_tree_is_listed_with_what_each_level_holds_uses_borrows_and_lends() -> None:
    # what ml lends: research's 16, science's 4 and ml's own 2, all unused
    tree = model.queues(tree_frame())["cohorts"]
    assert [(c["name"], c["parent"], c["depth"], c["queues"]) for c in tree] == [
        ("company", None, 0, ["batch"]),
        ("ml", "company", 1, ["research", "science"]),
    ]
    (top,) = tree[0]["quota"]
    (ml,) = tree[1]["quota"]
    assert (top["holds"], top["used"], top["borrowed"]) == (32, 24, 0)
    assert (ml["nominal"], ml["holds"], ml["used"], ml["borrowed"], ml["lends"]) == (
        2,
        22,
        0,
        0,
        22,
    )
    flat = model.queues(scenario())
    assert flat["cohorts"] == []


def test_faulty_gpus_past_their_pools_budget_are_listed_apart_from_those_out() -> None:
    first = scenario()
    frame = Frame(first.snapshot, first.result, first.unhealthy,
                  past_budget={"training-1/gpu0": "nvlink: XID 74"})  # fmt: skip
    body = model.changes(frame)
    assert body["outOfService"] == [{"gpu": OUT, "why": "XID 79"}]
    assert body["pastBudget"] == [{"gpu": "training-1/gpu0", "why": "nvlink: XID 74"}]
    # still in service: its slices are free for work
    node = model.node(frame, model.EVERYONE, "training-1")
    assert node is not None and "outOfService" not in node["gpus"][0]
    assert model.changes(Frame(first.snapshot, first.result))["pastBudget"] == []


def test_work_held_idle_is_listed_with_what_follows_and_names_only_for_who_may_see() -> None:
    from gpucarve.core.held_idle import IdleStage
    from gpucarve.engine.decisions import HeldIdle

    frame = scenario()
    now = frame.result.now
    held = (
        HeldIdle("notebooks/nb", "data-science", IdleStage.WARNED, now - 2000, now + 1600,
                 "idle: its GPUs below 5% activity for 2000s; … may reclaim it in 1600s"),
        HeldIdle("research/x", "research", IdleStage.RECLAIMABLE, now - 4000, None, "idle: …"),
    )  # fmt: skip
    frame = dataclasses.replace(frame, result=dataclasses.replace(frame.result, held_idle=held))
    alice = Viewer("alice", cluster=True, namespaces=frozenset({"notebooks"}))
    rows = model.held_idle(frame, alice)
    assert rows[0] == {
        "workload": "notebooks/nb", "queue": "data-science", "stage": "warned",
        "idleSeconds": 2000, "reclaimInSeconds": 1600, "message": held[0].message,
    }  # fmt: skip
    assert rows[1]["workload"] == rows[1]["message"] == "(not yours to see)"
    assert rows[1]["stage"] == "reclaimable" and rows[1]["reclaimInSeconds"] is None
