"""The dashboard as one file: the live page (its stylesheet and script, unchanged) with the
API's answers for one cycle written into it, so a simulation's what-if is read on the same
pages as the live cluster (`gpucarve simulate` writes it beside report.html). Opens offline;
nothing is fetched.

Every page the navigation reaches is answered ahead: the cluster, queues, pending (all teams
and each team), idle and changes; each pool's node pages and each listed node up to `NODES`
nodes in all; explain's chain for the first `EXPLAINED` pending workloads. A page beyond
those says it is not in this export.
"""

from __future__ import annotations

import html
import json
from typing import Any
from urllib.parse import quote

from gpucarve.dashboard.model import EVERYONE, PAGE
from gpucarve.dashboard.server import STATIC, Board, Pages

NODES = 1_000
EXPLAINED = 100


def _q(text: str) -> str:
    return quote(text, safe="")  # as the page's encodeURIComponent writes names


def answers(board: Board) -> dict[str, Any]:
    """Path (as the page asks it) -> the API's answer body for the board's latest cycle."""
    got = board.latest()
    if got is None:
        return {}
    pages = Pages(board)
    gen, frame, at = got
    v = EVERYONE

    def ask(handler: Any, **params: str) -> Any:
        status, body = handler(params, v, gen, frame, at)
        assert status == 200, body
        return body

    out: dict[str, Any] = {
        "/api/version": ask(pages.version),
        "/api/whoami": ask(pages.whoami),
        "/api/cluster": ask(pages.cluster),
        "/api/queues": ask(pages.queues),
        "/api/pending": ask(pages.pending),
        "/api/idle": ask(pages.idle),
        "/api/changes": ask(pages.changes),
    }
    for q in frame.policy.queues:
        out[f"/api/pending?team={_q(q.name)}"] = ask(pages.pending, team=q.name)
    nodes = 0
    for pool in frame.policy.pools:
        offset = 0
        while nodes < NODES:
            body = ask(pages.pool, pool=pool.name, offset=str(offset))
            out[f"/api/pools/{_q(pool.name)}?offset={offset}"] = body
            for n in body["nodes"]:
                out[f"/api/nodes/{_q(n['name'])}"] = {"generation": gen, **n}
            nodes += len(body["nodes"])
            offset += PAGE
            if offset >= body["total"]:
                break
    for w in out["/api/pending"]["workloads"][:EXPLAINED]:
        out[f"/api/explain?workload={_q(w['workload'])}"] = ask(
            pages.explain, workload=w["workload"]
        )
    return out


def _inline_json(data: Any) -> str:
    # inside <script>: no "</script>" may appear, nor the two line separators JavaScript
    # once refused in string literals
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return text.replace("</", "<\\/").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def standalone(board: Board, title: str) -> str:
    """The page with its stylesheet, script and the answers inline."""
    page = (STATIC / "index.html").read_text()
    css = (STATIC / "app.css").read_text()
    script = (STATIC / "app.js").read_text()
    page = page.replace("<title>gpucarve</title>", f"<title>{html.escape(title)}</title>")
    page = page.replace('<link rel="stylesheet" href="/static/app.css">', f"<style>{css}</style>")
    data = f"<script>window.GPUCARVE_DATA = {_inline_json(answers(board))};</script>"
    script = script.replace("</script", "<\\/script")
    module = f'<script type="module">{script}</script>'
    page = page.replace('<script type="module" src="/static/app.js"></script>', data + module)
    return page.replace("<h1>gpucarve</h1>", f"<h1>{html.escape(title)}</h1>")
