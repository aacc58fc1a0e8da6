"""The dashboard is usable without a mouse and without telling colours apart: axe-core (the
accessibility engine, run inside headless Chromium) finds no WCAG 2.1 A or AA violation on any
page (contrast included), and the pages are reached and a pending row opened from the
keyboard alone."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
from selenium.webdriver.common.keys import Keys

from gpucarve.dashboard.server import Board
from tests.browser import axe_source, chromium, drawn, show
from tests.integration.api import wait_for
from tests.unit.dashboard.serving import serving
from tests.unit.dashboard.test_model import scenario

ROUTES = ("cluster", "pool/production", "node/training-0", "queues", "pending", "idle", "changes")
RUN_AXE = """
const done = arguments[arguments.length - 1];
axe.run(document, {runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa']}})
  .then(r => done({
    passes: r.passes.length,
    violations: r.violations.map(v => [v.id, v.help, v.nodes.map(n => n.target.join(' '))]),
  }))
  .catch(e => done({passes: 0, violations: [['error', String(e), []]]}));
"""


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    board = Board()
    first = scenario()
    board.show(first, "2026-12-03T09:00:00+00:00")
    # a second cycle two minutes on: the queues page draws use over time too
    later = dataclasses.replace(first, result=dataclasses.replace(first.result, now=180))
    board.show(later, "2026-12-03T09:02:00+00:00")
    with serving(board) as url:
        yield url


def test_no_page_breaks_wcag_a_or_aa(base: str) -> None:
    axe = axe_source()
    found: dict[str, Any] = {}
    with chromium() as d:
        d.set_script_timeout(60)
        for route in ROUTES:
            show(d, base, route)
            if route == "pending":  # the explain chain open too
                d.execute_script("document.querySelector('details').open = true")
            d.execute_script(axe)
            if route == "queues":
                assert d.find_elements("css selector", "svg.spark")
            got = d.execute_async_script(RUN_AXE)
            assert got["passes"] > 10, (route, got)  # the rules ran and found things to check
            if got["violations"]:
                found[route] = got["violations"]
    assert found == {}


def test_every_page_is_reached_from_the_keyboard(base: str) -> None:
    with chromium() as d:
        show(d, base, "cluster")
        body = d.find_element("tag name", "body")
        body.send_keys(Keys.TAB)
        seen = []
        for _ in range(5):
            seen.append(d.switch_to.active_element.text)
            d.switch_to.active_element.send_keys(Keys.TAB)
        assert seen == ["Cluster", "Queues", "Pending", "Idle GPUs", "Health and changes"]
        # a node opens by name from the cluster page
        field = d.find_element("id", "node-name")
        field.send_keys("production-3", Keys.ENTER)
        wait_for(lambda: drawn(d).startswith("Node production-3"), what="the node by name")
        # Enter on a link opens its page; Enter on a pending row's summary opens its chain
        d.find_element("link text", "Pending").send_keys(Keys.ENTER)
        wait_for(lambda: drawn(d).startswith("Pending workloads"), what="the Pending page")
        summary = d.find_element("css selector", "details summary")
        summary.send_keys(Keys.ENTER)
        pre = d.find_element("css selector", "details pre")
        wait_for(lambda: pre.text.startswith("workload data-science/big"), what="explain shown")
