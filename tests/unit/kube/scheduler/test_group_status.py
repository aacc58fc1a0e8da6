"""A PodGroup's status from its pods: each phase, the reason a waiting gang gives, and a
timed-out gang's release kept until it is placed whole again."""

from __future__ import annotations

from typing import Any

import pytest

from gpucarve.kube.scheduler.group_status import group_status, upstream_condition


def _pod(name: str, phase: str = "Pending", node: str | None = None) -> dict[str, Any]:
    spec = {"nodeName": node} if node else {}
    return {"metadata": {"name": name, "namespace": "ns"}, "spec": spec, "status": {"phase": phase}}


@pytest.mark.parametrize(
    ("pods", "phase", "scheduled", "running"),
    [
        ([_pod("a"), _pod("b")], "Pending", 0, 0),
        ([_pod("a", node="n"), _pod("b")], "Pending", 1, 0),
        ([_pod("a", node="n"), _pod("b", node="n")], "Scheduled", 2, 0),
        ([_pod("a", "Running", "n"), _pod("b", node="n")], "Scheduled", 2, 1),
        ([_pod("a", "Running", "n"), _pod("b")], "Pending", 1, 1),  # a running pod counts once
        ([_pod("a", "Running", "n"), _pod("b", "Running", "n")], "Running", 2, 2),
        ([_pod("a", "Succeeded", "n"), _pod("b", "Succeeded", "n")], "Finished", 0, 0),
        ([_pod("a", "Failed", "n"), _pod("b", "Running", "n")], "Failed", 1, 1),
    ],
)
def test_phases(pods: list[dict[str, Any]], phase: str, scheduled: int, running: int) -> None:
    status = group_status(2, pods, frozenset(), "placement/x: no room", None)
    assert (status["phase"], status["scheduled"], status["running"]) == (phase, scheduled, running)
    (cond,) = status["conditions"]
    whole = phase in ("Scheduled", "Running", "Finished")
    assert cond["status"] == ("True" if whole else "False")
    assert status["reason"] == ("" if whole else "placement/x: no room")


def test_pods_bound_but_not_yet_seen_bound_count_as_scheduled() -> None:
    status = group_status(2, [_pod("a"), _pod("b")], frozenset({"ns/a", "ns/b"}), None, None)
    assert (status["phase"], status["scheduled"]) == ("Scheduled", 2)


def test_a_gang_short_of_pods_says_so_without_a_reason_of_the_scheduler() -> None:
    status = group_status(3, [_pod("a")], frozenset(), None, None)
    assert status["reason"] == "gang/min-member: 1 of its 3 pods exist; waiting for the rest"


def test_a_timed_out_gang_says_why_until_it_is_whole() -> None:
    released = "gang ns/g ran 1 pods, 1 short ...: its pods are released"
    status = group_status(2, [_pod("b")], frozenset(), "gang/min-member: ...", released)
    (cond,) = status["conditions"]
    assert (cond["reason"], cond["message"], status["reason"]) == (
        "GangTimeout", released, released,
    )  # fmt: skip
    whole = group_status(2, [_pod("a", node="n"), _pod("b", node="n")], frozenset(), None, released)
    assert whole["conditions"][0]["reason"] == "Scheduled" and whole["reason"] == ""


def test_pods_being_deleted_no_longer_hold_the_gang_whole() -> None:
    # a released gang's pods stay bound (and Running) until their grace period ends; the
    # release must show meanwhile, not a gang that looks placed
    released = "gang ns/g ran 2 pods, 1 short ...: its pods are released"
    going = [_pod("a", "Running", "n"), _pod("b", "Running", "n")]
    for p in going:
        p["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status = group_status(2, [*going, _pod("c")], frozenset(), None, released)
    assert (status["phase"], status["scheduled"], status["running"]) == ("Pending", 0, 0)
    assert status["conditions"][0]["reason"] == "GangTimeout"


def test_a_reservation_shows_while_the_gang_waits_and_goes_once_it_is_whole() -> None:
    held = {"nodes": ["n1"], "expectedStart": "2026-12-03T10:00:00Z", "waitsFor": ["ns/run"]}
    waiting = group_status(2, [_pod("a"), _pod("b")], frozenset(), "reserved n1", None, held)
    assert waiting["reservation"] == held
    whole = group_status(
        2, [_pod("a", node="n1"), _pod("b", node="n1")], frozenset(), None, None, held
    )
    assert "reservation" not in whole


def test_a_workload_api_pod_group_is_initially_scheduled_once_and_for_good() -> None:
    waiting = upstream_condition(2, [_pod("a", node="n"), _pod("b")], frozenset(), "quota", [])
    assert waiting == {"type": "PodGroupInitiallyScheduled", "status": "False",
                       "reason": "Unschedulable", "message": "quota"}  # fmt: skip
    # a pod the scheduler bound that the watch does not show yet counts
    done = upstream_condition(2, [_pod("a", node="n"), _pod("b")], frozenset({"ns/b"}), None, [])
    assert done is not None and (done["status"], done["reason"]) == ("True", "Scheduled")
    # terminal: once True it is never written again, even with the gang's pods gone
    assert upstream_condition(2, [], frozenset(), None, [done]) is None
    empty = upstream_condition(2, [], frozenset(), None, [waiting])
    assert empty is not None and "0 of its 2 pods exist" in empty["message"]
