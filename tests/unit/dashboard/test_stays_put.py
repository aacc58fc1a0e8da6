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
