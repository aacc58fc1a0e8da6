"""A simulation's what-if on the live dashboard's pages: `gpucarve simulate` writes
dashboard.html, the page with its script and gpucarve's last cycle of the arrival window
inline, linked from report.html; it opens offline (drawn in headless Chromium where there is
one)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpucarve.cli.main import app
from tests.browser import chromium, drawn


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sim")
    result = CliRunner().invoke(app, ["simulate", "--days", "0.5", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def _data(page: str) -> dict[str, Any]:
    m = re.search(r"<script>window\.GPUCARVE_DATA = (.*?);</script>", page, flags=re.S)
    assert m is not None
    data: dict[str, Any] = json.loads(m.group(1))
    return data


def test_the_page_carries_its_script_and_answers_inline(run: Path) -> None:
    page = (run / "dashboard.html").read_text()
    assert 'href="dashboard.html"' in (run / "report.html").read_text()
    # nothing fetched: no stylesheet or script by address, no other origin
    assert not re.search(r'(src|href)="(?!#)', page)
    data = _data(page)
    pools = {p["name"]: p for p in data["/api/cluster"]["pools"]}
    assert sorted(pools) == ["dev", "production", "training"]
    for p in pools.values():
        assert sum(p["states"].values()) == pytest.approx(p["gpus"], abs=1e-3)
    # every node the navigation reaches is answered, with its pool's page
    assert "/api/pools/training?offset=0" in data and "/api/nodes/training-0" in data
    # the last cycle of the arrival window (12 h), never past it
    assert data["/api/version"]["now"] <= 12 * 3600
    waiting = data["/api/pending"]["workloads"]
    for w in waiting[:3]:
        key = "/api/explain?workload=" + w["workload"].replace("/", "%2F")
        assert data[key]["explain"][0].startswith(f"workload {w['workload']}")
    results = json.loads((run / "results.json").read_text())["results"]["gpucarve"]
    assert set(results["teams"]) == {q["name"] for q in data["/api/queues"]["queues"]}


def test_it_opens_offline_in_a_browser(run: Path) -> None:
    with chromium() as d:  # skips (fails in CI) without Chromium and its driver
        d.get(f"file://{run / 'dashboard.html'}#cluster")
        text = drawn(d)
        assert "training\tH100-SXM5-80GB\texclusive\t4\t32" in text
        d.get(f"file://{run / 'dashboard.html'}?r=1#node/production-0")
        assert "Node production-0 (pool production)" in drawn(d)
        d.get(f"file://{run / 'dashboard.html'}?r=2#pool/training/400")
        assert "not in this file" in drawn(d)
        # queue use over the run against the nominal quota: above it, the queue borrowed
        d.get(f"file://{run / 'dashboard.html'}?r=3#queues")
        drawn(d)
        sparks = [
            e.get_attribute("aria-label") or ""
            for e in d.find_elements("css selector", "svg.spark")
        ]
        assert sparks and all("nominal" in label for label in sparks)
        assert any("above nominal (borrowing)" in label for label in sparks)
