"""A self-contained HTML report: the comparison table and plots drawn as inline SVG.

No scripts, fonts or images from elsewhere: the file opens anywhere, also offline, and renders
the same every time (a pure function of the results).
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf")
W, H, PAD_L, PAD_B, PAD_T, PAD_R = 560, 260, 52, 34, 14, 12


def _fmt(v: float) -> str:
    return f"{v:.4g}"


def line_chart(
    title: str,
    series: Mapping[str, Sequence[float]],
    xs: Sequence[float],
    y_max: float | None = None,
    x_label: str = "",
    y_label: str = "",
    dashed: Mapping[str, float] | None = None,
) -> str:
    """An SVG line chart; `dashed` adds horizontal reference lines (e.g. nominal quota)."""
    values = [v for s in series.values() for v in s] + list((dashed or {}).values())
    top = y_max if y_max is not None else max(values, default=1.0) * 1.1 or 1.0
    x0, x1 = (xs[0], xs[-1]) if xs else (0.0, 1.0)
    span = (x1 - x0) or 1.0
    pw, ph = W - PAD_L - PAD_R, H - PAD_T - PAD_B

    def px(x: float) -> float:
        return PAD_L + (x - x0) / span * pw

    def py(y: float) -> float:
        return PAD_T + ph - min(y, top) / top * ph

    out = [
        f"<figure><figcaption>{html.escape(title)}</figcaption>"
        f'<svg class="plot" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" '
        f'aria-label="{html.escape(title)}" xmlns="http://www.w3.org/2000/svg">',
        f'<rect x="{PAD_L}" y="{PAD_T}" width="{pw}" height="{ph}" fill="#fafafa" stroke="#ccc"/>',
    ]
    for i in range(5):
        y = top * i / 4
        out.append(
            f'<line x1="{PAD_L}" x2="{PAD_L + pw}" y1="{py(y):.1f}" y2="{py(y):.1f}" '
            'stroke="#e4e4e4"/>'
            f'<text x="{PAD_L - 6}" y="{py(y) + 4:.1f}" text-anchor="end" font-size="10">'
            f"{_fmt(y)}</text>"
        )
    for i in range(5):
        x = x0 + span * i / 4
        out.append(
            f'<text x="{px(x):.1f}" y="{H - PAD_B + 14}" text-anchor="middle" font-size="10">'
            f"{_fmt(x)}</text>"
        )
    out.append(
        f'<text x="{PAD_L + pw / 2}" y="{H - 4}" text-anchor="middle" font-size="11">'
        f"{html.escape(x_label)}</text>"
        f'<text x="12" y="{PAD_T + ph / 2}" text-anchor="middle" font-size="11" '
        f'transform="rotate(-90 12 {PAD_T + ph / 2})">{html.escape(y_label)}</text>'
    )
    for i, (name, ys) in enumerate(series.items()):
        colour = COLOURS[i % len(COLOURS)]
        points = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(xs, ys, strict=False))
        out.append(
            f'<polyline class="series" fill="none" stroke="{colour}" stroke-width="1.6" '
            f'points="{points}">'
            f"<title>{html.escape(name)}</title></polyline>"
        )
        out.append(
            f'<text x="{PAD_L + 8}" y="{PAD_T + 14 + 13 * i}" font-size="11" fill="{colour}">'
            f"{html.escape(name)}</text>"
        )
    for i, (name, y) in enumerate((dashed or {}).items()):
        colour = COLOURS[i % len(COLOURS)]
        out.append(
            f'<line x1="{PAD_L}" x2="{PAD_L + pw}" y1="{py(y):.1f}" y2="{py(y):.1f}" '
            f'stroke="{colour}" stroke-dasharray="5 4"><title>{html.escape(name)}</title></line>'
        )
    out.append("</svg></figure>")
    return "".join(out)


def cdf(values: Sequence[float], points: int = 100) -> tuple[list[float], list[float]]:
    """(x, fraction ≤ x) at `points` quantiles of the sorted values."""
    if not values:
        return [0.0], [0.0]
    ordered = sorted(values)
    xs, ys = [], []
    for i in range(1, points + 1):
        k = max(1, round(i / points * len(ordered)))
        xs.append(float(ordered[k - 1]))
        ys.append(k / len(ordered))
    return xs, ys


def _table(rows: Sequence[Sequence[str]], head: Sequence[str]) -> str:
    cells = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows
    )
    return f"<table><thead><tr>{cells}</tr></thead><tbody>{body}</tbody></table>"


CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;
margin:2rem auto;max-width:1200px;color:#222}
h1{font-size:1.5rem}h2{font-size:1.15rem;margin-top:2rem}
table{border-collapse:collapse;margin:.5rem 0}
td,th{border:1px solid #ddd;padding:.3rem .6rem;text-align:right}
td:first-child,th:first-child{text-align:left}th{background:#f3f3f3}
figure{display:inline-block;margin:.5rem 1rem .5rem 0}figcaption{font-weight:600;font-size:.9rem}
.note{color:#555;font-size:.9rem}
"""


def render(
    title: str,
    rows: Sequence[tuple[str, Sequence[str]]],
    policies: Sequence[str],
    verdict: str,
    series: Mapping[str, Mapping[str, Any]],
    notes: Sequence[str] = (),
) -> str:
    """The whole report. `series[policy]` is `metrics.timelines` output."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f"<p>{html.escape(verdict)}</p>",
        "<h2>Comparison</h2>",
        _table([(label, *values) for label, values in rows], ["metric", *policies]),
        "<h2>GPU allocation per pool over time</h2>",
    ]
    for policy in policies:
        tl = series[policy]
        hours = [t / 3600 for t in tl["times"]]
        parts.append(
            line_chart(
                f"{policy}: allocated share of each pool",
                tl["pool_allocation"],
                hours,
                y_max=1.0,
                x_label="hours",
                y_label="allocated",
            )
        )
    parts.append("<h2>Queue usage against nominal quota (GPU-equivalents)</h2>")
    for policy in policies:
        tl = series[policy]
        hours = [t / 3600 for t in tl["times"]]
        parts.append(
            line_chart(
                f"{policy}: GPUs held per queue (dashed: nominal)",
                tl["queue_gpus"],
                hours,
                x_label="hours",
                y_label="GPU-equivalents",
                dashed=tl["queue_nominal_gpus"],
            )
        )
    parts.append("<h2>GPUs free while work waited, by cause</h2>")
    for policy in policies:
        tl = series[policy]
        idle = tl.get("idle_by_cause", {})
        hours = [t / 3600 for t in tl["times"]]
        # in all for every policy; per pool for the last (gpucarve's, when it runs)
        keys = ["all"] + ([k for k in idle if k != "all"] if policy == policies[-1] else [])
        for key in keys:
            if not idle.get(key):
                continue
            where = "all pools" if key == "all" else f"pool {key}"
            parts.append(
                line_chart(
                    f"{policy}, {where}: free GPUs by why waiting work did not take them",
                    idle[key],
                    hours,
                    x_label="hours",
                    y_label="GPU-equivalents",
                )
            )
    parts.append("<h2>Waiting time</h2>")
    # one shared x axis: evaluate every policy's CDF on the union of quantile points
    grid = sorted({x for p in policies for x in cdf([w / 3600 for w in series[p]["waits"]])[0]})
    waits = {p: sorted(w / 3600 for w in series[p]["waits"]) for p in policies}
    cdfs = {
        p: [sum(1 for w in waits[p] if w <= x) / max(1, len(waits[p])) for x in grid]
        for p in policies
    }
    parts.append(
        line_chart(
            "Waiting-time CDF (all workloads)",
            cdfs,
            grid,
            y_max=1.0,
            x_label="hours",
            y_label="share waited ≤ x",
        )
    )
    for note in notes:
        parts.append(f'<p class="note">{html.escape(note)}</p>')
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
