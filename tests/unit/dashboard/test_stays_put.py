"""The live dashboard redraws each new cycle and keeps what the user holds: an explain chain
opened on the Pending page stays open (and is asked again, so it is the new cycle's), a node
name typed on the Cluster page stays typed, while cycles keep coming."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from gpucarve.dashboard.server import Board
from tests.browser import chromium, show
from tests.integration.api import wait_for
from tests.unit.dashboard.serving import serving
from tests.unit.dashboard.test_model import scenario


@pytest.fixture
def cycling() -> Iterator[str]:
    """A dashboard whose board gets a new cycle every half second."""
    board = Board()
    frame = scenario()
    board.show(frame, "2026-12-03T09:00:00+00:00")
    stop = threading.Event()

    def cycles() -> None:
        while not stop.wait(0.5):
            board.show(frame, "2026-12-03T09:00:01+00:00")

    thread = threading.Thread(target=cycles, daemon=True)
    thread.start()
    try:
        with serving(board) as url:
            yield url
    finally:
        stop.set()
        thread.join(5)


def _drawn_at(d: Any) -> float:
    return float(d.execute_script("return Number(document.getElementById('main').dataset.readyAt)"))


def _redrawn(d: Any, since: float) -> None:
    """Wait for two more redraws (the page asks every 3 s) after `since`."""
    first = wait_for(lambda: (t := _drawn_at(d)) > since and t, what="a redraw", timeout_s=15)
    wait_for(lambda: _drawn_at(d) > first, what="another redraw", timeout_s=15)


def test_an_opened_explain_and_a_typed_node_name_survive_new_cycles(cycling: str) -> None:
    with chromium() as d:
        show(d, cycling, "pending")
        d.find_element("css selector", "details summary").click()
        chain = "return document.querySelector('details pre').textContent"
        big = "workload data-science/big"
        wait_for(lambda: d.execute_script(chain).startswith(big), what="the chain shown")
        _redrawn(d, _drawn_at(d))
        assert d.execute_script("return document.querySelector('details').open") is True
        assert d.execute_script(chain).startswith(big)
        show(d, cycling, "cluster")
        field = d.find_element("id", "node-name")
        field.send_keys("training-")
        _redrawn(d, _drawn_at(d))
        assert d.find_element("id", "node-name").get_attribute("value") == "training-"
        assert d.switch_to.active_element.get_attribute("id") == "node-name"  # still typing


def test_the_cycles_time_is_shown_for_people(cycling: str) -> None:
    """The status line gives the last cycle's time in the viewer's own time zone, to the
    second (not the ISO text the server sends)."""
    import re

    with chromium() as d:
        show(d, cycling, "cluster")
        status = wait_for(
            lambda: (t := d.find_element("id", "status").text).startswith("last cycle") and t,
            what="the status line",
        )
        assert "T09:00" not in status and "+00:00" not in status, status
        assert re.search(r"\b\d{1,2}:\d{2}:\d{2}\b", status) and "2026" in status, status


def test_the_server_keeps_a_cycles_time_to_the_second() -> None:
    import datetime
    from types import SimpleNamespace

    board = Board()
    at = datetime.datetime(2026, 12, 3, 9, 0, 1, 123456, tzinfo=datetime.UTC)
    seen = SimpleNamespace(snapshot=scenario().snapshot, result=scenario().result,
                           unhealthy={}, reconfiguring=frozenset(), at=at,
                           past_budget={})  # fmt: skip
    board.observe(seen)  # type: ignore[arg-type]
    got = board.latest()
    assert got is not None and got[2] == "2026-12-03T09:00:01+00:00"
