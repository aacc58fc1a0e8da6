"""A shadow's dashboard shows its running difference with the real scheduler (per queue: what
it would run now that waits, the slice-hours such work waited, the workloads started later than
it would have): the Shadow page and /api/shadow, which a scheduler that binds does not have."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any, cast

import pytest

from gpucarve.dashboard.server import Board
from gpucarve.kube.scheduler.reactions import Decided, Parts
from gpucarve.kube.scheduler.shadow import WouldStart
from gpucarve.metrics.scheduler_metrics import SchedulerMetrics
from tests.browser import axe_source, chromium, show
from tests.unit.dashboard.serving import serving
from tests.unit.dashboard.test_a11y import RUN_AXE
from tests.unit.dashboard.test_model import scenario
from tests.unit.kube.scheduler.test_shadow import T0, _decided, _parts


def _get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


@pytest.fixture
def served() -> Iterator[tuple[str, str]]:
    """Two dashboards of the same cycle: a shadow's (research waited 30 s for 8 slices it
    would have started), and a scheduler's that binds."""
    m, would = SchedulerMetrics(), WouldStart()
    for t in (T0, T0 + 30):
        would.react(cast(Parts, _parts(t, m)), cast(Decided, _decided(["research/a"], [])))
    boards = [Board(), Board()]
    for board in boards:
        board.show(scenario(), "2026-12-03T09:00:00+00:00")
    with serving(boards[0], shadow=would.summary) as shadow, serving(boards[1]) as binding:
        yield shadow, binding


def test_the_api_says_whether_it_is_a_shadow_and_what_it_would_have_done(
    served: tuple[str, str],
) -> None:
    shadow, binding = served
    assert _get(f"{shadow}/api/version")[1]["shadow"] is True
    status, body = _get(f"{shadow}/api/shadow")
    assert status == 200 and body["wouldHaveEvicted"] == 0
    (row,) = body["queues"]
    assert (row["queue"], row["aheadSlices"], row["startedLater"]) == ("research", 8, 0)
    assert row["waitedSliceHours"] == round(240 / 3600, 3)
    assert _get(f"{binding}/api/version")[1]["shadow"] is False
    status, body = _get(f"{binding}/api/shadow")
    assert status == 404 and "not a shadow" in body["message"]


def test_the_shadow_page_is_drawn_and_linked_only_on_a_shadow(served: tuple[str, str]) -> None:
    shadow, binding = served
    with chromium() as d:
        text = show(d, shadow, "shadow")
        assert text.startswith("What gpucarve would have done beside the real scheduler")
        row = [r.text for r in d.find_elements("css selector", "tbody tr")]
        assert row == ["research 8 0.067 0 - -"]
        link = d.find_element("id", "shadow-link")
        assert link.is_displayed() and link.get_attribute("aria-current") == "page"
        d.set_script_timeout(60)
        d.execute_script(axe_source())
        got = d.execute_async_script(RUN_AXE)
        assert got["passes"] > 5 and got["violations"] == [], got
        show(d, binding, "cluster")
        assert not d.find_element("id", "shadow-link").is_displayed()
