"""The Queues page draws a cohort tree (nested cohorts) with each cohort under its parent and
what it holds, uses, borrows and lends; a flat policy's page has no tree."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpucarve.dashboard.server import Board
from tests.browser import axe_source, chromium, show
from tests.unit.dashboard.serving import serving
from tests.unit.dashboard.test_a11y import RUN_AXE
from tests.unit.dashboard.test_model import scenario, tree_frame


@pytest.fixture
def served() -> Iterator[tuple[str, str]]:
    boards = [Board(), Board()]
    boards[0].show(tree_frame(), "2026-12-07T09:00:00+00:00")
    boards[1].show(scenario(), "2026-12-07T09:00:00+00:00")
    with serving(boards[0]) as tree, serving(boards[1]) as flat:
        yield tree, flat


def test_the_queues_page_draws_the_tree(served: tuple[str, str]) -> None:
    tree, flat = served
    with chromium() as d:
        show(d, tree, "queues")
        top = d.find_element("css selector", "#cohort-tree > ul > li[data-cohort=company]")
        inner = top.find_element("css selector", "ul > li[data-cohort=ml]")
        assert inner.text.startswith(
            "cohort ml: h100-full holds 22 slices (2 its own), members use 0, borrowed 0, "
            "lends 22 · queues research, science"
        ), inner.text
        assert top.text.startswith("cohort company: h100-full holds 32 slices, members use 24")
        d.set_script_timeout(60)
        d.execute_script(axe_source())
        got = d.execute_async_script(RUN_AXE)
        assert got["violations"] == [], got
        show(d, flat, "queues")
        assert d.find_elements("id", "cohort-tree") == []
