"""The HTML report: well-formed, self-contained, with the comparison and the plots."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

from typer.testing import CliRunner

from gpucarve.cli.main import app
from gpucarve.sim.run.metrics import timelines
from gpucarve.sim.run.report import cdf, line_chart, nice_ticks
from gpucarve.sim.run.runner import Simulator
from tests.engine.builders import policy, pool, queue, workload
from tests.paths import BUILTIN

VOID = {"meta", "br", "img", "input", "link", "hr"}


class Balance(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.external: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("src", "href") and value:
                self.external.append(value)
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        pass

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"unexpected </{tag}> with open {self.stack[-3:]}")
        else:
            self.stack.pop()


def test_report_is_valid_html_with_plots(tmp_path: Path) -> None:
    args = [
        "simulate",
        "--policy",
        str(BUILTIN / "three-teams.yaml"),
        "--days",
        "0.4",
        "--out",
        str(tmp_path),
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    page = (tmp_path / "report.html").read_text()
    checker = Balance()
    checker.feed(page)
    assert checker.errors == [] and checker.stack == []
    # nothing is fetched from elsewhere; the one link is the dashboard written beside it
    assert checker.external == ["dashboard.html"]
    svgs = re.findall(r"<svg.*?</svg>", page, flags=re.S)
    # allocation, queue usage and idle GPUs by cause per policy (and per pool where gpucarve
    # kept GPUs free while work waited), and the wait CDF
    per_pool = page.count('aria-label="gpucarve, pool ')
    assert per_pool >= 1 and len(svgs) == 10 + per_pool
    for svg in svgs:
        root = ET.fromstring(svg)  # each plot is well-formed SVG
        assert root.findall(".//{http://www.w3.org/2000/svg}polyline")
    for needle in (
        "GPU allocation (time-weighted)",
        "GPUs free while work waited, by cause",
        "gang first-try success",
        "kube-default",
        "static-quota",
        # the terminal's per-pool and per-team tables, and what every name means
        "Pools: allocation / SM utilisation",
        "Teams: wait p95 / GPU-hours / cost (USD)",
        "Idle GPU-hours by cause",
        # fairness per cohort and pool, for every policy (baselines judged by the policy)
        "Fairness: share received / entitled (worst hour&#x27;s deviation)",
        "company / training: Jain&#x27;s index, hourly mean",
        "<dt>fairness</dt>",
        "<dt>kube-default</dt>",
        "<dt>SM-weighted utilisation</dt>",
        "<dt>GPU allocation</dt>",
        # the case study is named, the wait CDF on a log axis
        "a start-up with a 25,000 CHF a month GPU budget",
        ">1 min<",
        ">100 h<",
    ):
        assert needle in page, needle
    # legends sit beside the plots, never drawn over the data: a series is named in the list
    # under its plot and not as text inside it
    legends = re.findall(r'<ul class="legend">(.*?)</ul>', page, flags=re.S)
    assert len(legends) == len(svgs)
    for svg, legend in zip(svgs, legends, strict=True):
        names = set(re.findall(r"</i>(.*?)</li>", legend))
        texts = set(re.findall(r"<text[^>]*>(.*?)</text>", svg))
        assert names and not names & texts
    # the headline is one figure a sentence
    summary = re.search(r"<h2>In short</h2><ul>(.*?)</ul>", page, flags=re.S)
    assert summary is not None
    items = re.findall(r"<li>(.*?)</li>", summary.group(1))
    assert len(items) >= 4 and all(len(i) < 400 for i in items[:-1])


def test_ticks_are_round_numbers() -> None:
    assert nice_ticks(44.55) == [0, 20, 40, 60]
    assert nice_ticks(5.577) == [0, 2, 4, 6]
    assert nice_ticks(1.0) == [0, 0.25, 0.5, 0.75, 1.0]
    assert nice_ticks(59.4)[-1] >= 59.4
    svg = line_chart("t", {"a": [0.0, 44.55]}, [0.0, 48.0], x_label="hours")
    labels = re.findall(r">([0-9.,]+)</text>", svg)
    assert "44.55" not in labels and "60" in labels and "12" in labels and "48" in labels


def test_allocation_below_kube_default_is_explained(tmp_path: Path) -> None:
    args = ["simulate", "--days", "0.5", "--out", str(tmp_path)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    page = (tmp_path / "report.html").read_text()
    doc = json.loads((tmp_path / "results.json").read_text())["results"]
    ours, base = doc["gpucarve"], doc["kube-default"]
    # each note appears exactly when its figure is lower under gpucarve
    assert ("allocation counts GPUs held, not work done" in page) == (
        ours["allocation"] < base["allocation"]
    )
    assert ("SM-weighted utilisation is lower under gpucarve here" in page) == (
        ours["sm_utilisation"] < base["sm_utilisation"]
    )
    assert ours["sm_utilisation"] < base["sm_utilisation"]  # this half day is such a run


def test_line_chart_scales_points_into_the_plot() -> None:
    svg = line_chart("t", {"a": [0.0, 0.5, 1.0]}, [0.0, 1.0, 2.0], y_max=1.0)
    root = ET.fromstring(svg[svg.index("<svg") : svg.index("</svg>") + 6])
    (line,) = root.findall(".//{http://www.w3.org/2000/svg}polyline")
    pts = [tuple(map(float, p.split(","))) for p in line.get("points", "").split()]
    assert pts[0][1] > pts[1][1] > pts[2][1]  # higher values are drawn higher
    assert pts[0][0] < pts[1][0] < pts[2][0]


def test_cdf_and_timelines() -> None:
    xs, ys = cdf([3.0, 1.0, 2.0, 4.0], points=4)
    assert xs == [1.0, 2.0, 3.0, 4.0] and ys == [0.25, 0.5, 0.75, 1.0]
    p = policy(
        pools=[pool("h", "H100-SXM5-80GB", 1, 8)],
        queues=[queue("r", {"h100-full": {"nominal": 8}})],
    )
    result = Simulator(p, [workload(p, "a", "r", gpus=4, duration=100, submit=50)]).run()
    tl = timelines(result, (0, 200), samples=4)
    assert tl["times"] == [0, 50, 100, 150, 200]
    assert tl["pool_allocation"]["h"] == [0.0, 0.5, 0.5, 0.0, 0.0]
    assert tl["queue_gpus"]["r"] == [0.0, 4.0, 4.0, 0.0, 0.0]
    assert tl["queue_nominal_gpus"] == {"r": 8.0}
    assert tl["waits"] == [0]


def test_idle_by_cause_over_time() -> None:
    # a 6-GPU job runs 0-100 s; an 8-GPU job waits for it on quota from 20 s: 2 GPUs sit
    # free for nominal-quota until 100 s
    p = policy(
        pools=[pool("h", "H100-SXM5-80GB", 1, 8)],
        queues=[queue("r", {"h100-full": {"nominal": 8}})],
    )
    ws = [
        workload(p, "a", "r", gpus=6, duration=100),
        workload(p, "b", "r", gpus=8, duration=100, submit=20),
    ]
    tl = timelines(Simulator(p, ws).run(), (0, 200), samples=4)
    # in all, and per pool
    series = {"nominal-quota": [0.0, 2.0, 0.0, 0.0, 0.0]}
    assert tl["idle_by_cause"] == {"all": series, "h": series}
