"""A self-contained HTML report: the comparison table and plots drawn as inline SVG.

No scripts, fonts or images from elsewhere: the file opens anywhere, also offline, and renders
the same every time (a pure function of the results).
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from typing import Any

# Okabe-Ito: told apart with most colour-vision deficiencies (the dashboard's palette too)
COLOURS = ("#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000")
W, H, PAD_L, PAD_B, PAD_T, PAD_R = 560, 250, 64, 36, 12, 14
LOG_TICKS = ((1 / 60, "1 min"), (1 / 6, "10 min"), (1.0, "1 h"), (10.0, "10 h"), (100.0, "100 h"))


def _fmt(v: float) -> str:
    return f"{v:.4g}"


def nice_ticks(top: float, count: int = 4) -> list[float]:
    """Round ticks from 0 covering `top`: steps of 1, 2, 2.5 or 5 times a power of ten."""
    if top <= 0:
        return [0.0, 1.0]
    raw = top / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    n = math.ceil(top / step - 1e-9)
    return [round(i * step, 10) for i in range(n + 1)]


def _hour_ticks(span: float, count: int = 4) -> list[float]:
    """Ticks on an hours axis at whole hours, quarter days, days or weeks."""
    step = next((h for h in (1, 2, 3, 6, 12, 24, 48, 168) if h * count >= span), 168.0)
    if span < count:
        return nice_ticks(span, count)
    return [i * float(step) for i in range(int(span // step) + 1)]


def _tick_text(v: float) -> str:
    return f"{v:g}" if abs(v) < 1e5 else f"{v:,.0f}"


def line_chart(
    title: str,
    series: Mapping[str, Sequence[float]],
    xs: Sequence[float],
    y_max: float | None = None,
    x_label: str = "",
    y_label: str = "",
    dashed: Mapping[str, float] | None = None,
    x_log: bool = False,
) -> str:
    """An SVG line chart with round ticks and its legend beside it (never on the data);
    `dashed` adds horizontal reference lines (e.g. nominal quota); `x_log`: a log axis in
    hours from 1 min to 100 h (values below 1 min drawn at 1 min)."""
    values = [v for s in series.values() for v in s] + list((dashed or {}).values())
    yticks = nice_ticks(y_max if y_max is not None else max(values, default=1.0))
    top = yticks[-1]
    if x_log:
        lo, hi = math.log10(LOG_TICKS[0][0]), math.log10(LOG_TICKS[-1][0])
        xticks = [(math.log10(v), label) for v, label in LOG_TICKS]
        xs = [math.log10(min(max(x, LOG_TICKS[0][0]), LOG_TICKS[-1][0])) for x in xs]
        x0, span = lo, hi - lo
    else:
        x0, x1 = (xs[0], xs[-1]) if xs else (0.0, 1.0)
        steps = _hour_ticks(x1 - x0) if x_label == "hours" else nice_ticks(x1 - x0)
        xticks = [(x0 + t, _tick_text(x0 + t)) for t in steps if x0 + t <= x1 + 1e-9]
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
    for y in yticks:
        out.append(
            f'<line x1="{PAD_L}" x2="{PAD_L + pw}" y1="{py(y):.1f}" y2="{py(y):.1f}" '
            'stroke="#e4e4e4"/>'
            f'<text x="{PAD_L - 6}" y="{py(y) + 4:.1f}" text-anchor="end" font-size="10">'
            f"{_tick_text(y)}</text>"
        )
    for x, label in xticks:
        out.append(
            f'<text x="{px(x):.1f}" y="{H - PAD_B + 14}" text-anchor="middle" font-size="10">'
            f"{html.escape(label)}</text>"
        )
    out.append(
        f'<text x="{PAD_L + pw / 2}" y="{H - 4}" text-anchor="middle" font-size="11">'
        f"{html.escape(x_label)}</text>"
        f'<text x="14" y="{PAD_T + ph / 2}" text-anchor="middle" font-size="11" '
        f'transform="rotate(-90 14 {PAD_T + ph / 2})">{html.escape(y_label)}</text>'
    )
    legend = []
    for i, (name, ys) in enumerate(series.items()):
        colour = COLOURS[i % len(COLOURS)]
        points = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(xs, ys, strict=False))
        out.append(
            f'<polyline class="series" fill="none" stroke="{colour}" stroke-width="1.6" '
            f'points="{points}">'
            f"<title>{html.escape(name)}</title></polyline>"
        )
        legend.append(f'<li><i style="background:{colour}"></i>{html.escape(name)}</li>')
    for i, (name, y) in enumerate((dashed or {}).items()):
        colour = COLOURS[i % len(COLOURS)]
        out.append(
            f'<line x1="{PAD_L}" x2="{PAD_L + pw}" y1="{py(y):.1f}" y2="{py(y):.1f}" '
            f'stroke="{colour}" stroke-dasharray="5 4"><title>{html.escape(name)}</title></line>'
        )
    out.append("</svg>")
    out.append(f'<ul class="legend">{"".join(legend)}</ul></figure>')
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
margin:2rem auto;max-width:1200px;color:#222;padding:0 1rem}
h1{font-size:1.5rem}h2{font-size:1.15rem;margin-top:2rem}
table{border-collapse:collapse;margin:.5rem 0}
td,th{border:1px solid #ddd;padding:.3rem .6rem;text-align:right}
td:first-child,th:first-child{text-align:left}th{background:#f3f3f3}
figure{display:inline-block;vertical-align:top;margin:.5rem 1rem .5rem 0}
figcaption{font-weight:600;font-size:.9rem}
ul.legend{list-style:none;padding:0;margin:.2rem 0 0 64px;display:flex;flex-wrap:wrap;
gap:.3rem 1rem;font-size:.85rem;max-width:480px}
ul.legend i{display:inline-block;width:.8rem;height:.8rem;margin-right:.3rem;vertical-align:-1px}
dl{display:grid;grid-template-columns:max-content 1fr;gap:.3rem 1rem}dt{font-weight:600}dd{margin:0}
.note{color:#444}
"""

# What each policy and figure of the report means (the terminal prints the same figures).
DEFINITIONS: tuple[tuple[str, str], ...] = (
    (
        "kube-default",
        "The cluster before sharing, as Kubernetes' default scheduler and the "
        "NVIDIA device plugin run it: every GPU whole (MIG and time-slicing pools become exclusive "
        "pools of the same GPUs, and a request for a MIG instance, a replica or a fraction asks "
        "for a whole GPU), no quotas, pods placed one by one, first fit, in priority and arrival "
        "order; a gang's pods hold their GPUs while the rest of the gang waits; no preemption.",
    ),
    (
        "static-quota",
        "The policy's pools and sharing modes with each queue held to its nominal "
        "quota, as a namespace ResourceQuota would (no cohorts, no borrowing); still pod by pod, "
        "first fit, without gangs or preemption.",
    ),
    (
        "gpucarve",
        "The policy as written, through gpucarve's engine: quotas with borrowing and "
        "reclaim, fair share, gangs placed whole, fragmentation-aware placement, preemption.",
    ),
    (
        "GPU allocation",
        "GPUs held by running pods over the pools' GPUs, time-weighted over the "
        "arrival window; a MIG instance or a replica counts its share of its GPU. Held is not "
        "busy: a part-placed gang or an idle notebook holds GPUs and does no work.",
    ),
    (
        "GPU busy",
        "The share of GPU time some work kept a GPU busy (what DCGM's GPU "
        'utilisation reports), over every GPU of the pools; "of the GPUs pods use": over the '
        "GPUs holding a pod, what a per-pod dashboard shows.",
    ),
    (
        "SM-weighted utilisation",
        "Each running workload's utilisation times its slice's share "
        "of the GPU's streaming multiprocessors, over all SMs: a 1g.10gb job at 60 % counts "
        "60 % of a seventh of an A100. Under kube-default the same job runs on a whole GPU and "
        "counts all of its SMs.",
    ),
    ("fragmentation", "Free capacity that no waiting workload could use where it lies."),
    (
        "wait",
        "Submission to first start (work that never started counts until the run ends); "
        '"until last start": to its last start, so evicted and restarted work counts again.',
    ),
    (
        "completion time, slowdown",
        "Submission to finish; slowdown is completion time over run "
        "time (1: never waited, never slowed by sharing).",
    ),
    (
        "gang first-try success",
        "Gangs that started whole at their first start, never held "
        "GPUs part-placed, and were never evicted.",
    ),
    (
        "GPU-hours lost to preemption",
        "GPU-hours of evicted work since its last start: work done again.",
    ),
    (
        "fairness",
        "Per cohort and pool, each queue's share of the GPUs the cohort's queues hold nominal "
        "quota in there: received against entitled (its nominal as far as its demand reaches, "
        "what others leave divided by weight, none past its demand), over the run; the worst "
        "hour's deviation between them; Jain's index of received over entitled per hour (1: "
        "every queue got its share).",
    ),
    (
        "idle by cause",
        "GPUs free while work waited, by what kept the first waiting workload "
        "that could use them off (its quota, borrowing limit, what the cohort lends, a gang larger "
        "than what is free, fragmentation, the MIG layout…); nothing-waiting: no work could use "
        "them.",
    ),
)


def _dl(items: Sequence[tuple[str, str]]) -> str:
    body = "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>" for k, v in items)
    return f"<dl>{body}</dl>"


Table = tuple[str, Sequence[str], Sequence[Sequence[str]]]  # title, header, rows


def render(
    title: str,
    rows: Sequence[tuple[str, Sequence[str]]],
    policies: Sequence[str],
    summary: Sequence[str],
    series: Mapping[str, Mapping[str, Any]],
    notes: Sequence[str] = (),
    tables: Sequence[Table] = (),
    dashboard: bool = False,
) -> str:
    """The whole report. `summary`: the headline, one sentence each; `notes`: how to read the
    figures of this run; `tables`: per pool, per team, idle by cause; `series[policy]` is
    `metrics.timelines` output."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
    ]
    if summary:
        items = "".join(f"<li>{html.escape(line)}</li>" for line in summary)
        parts.append(f"<h2>In short</h2><ul>{items}</ul>")
    if dashboard:
        parts.append(
            "<p>The cluster at the end of the arrival window under gpucarve, on the pages of "
            "the live dashboard (pools, each GPU's slices by team, queues, why work waits, "
            'idle GPUs by cause): <a href="dashboard.html">dashboard.html</a>.</p>'
        )
    parts += [
        "<h2>Comparison</h2>",
        _table([(label, *values) for label, values in rows], ["metric", *policies]),
    ]
    if notes:
        parts.append("<h2>Reading these figures</h2>")
        parts += [f'<p class="note">{html.escape(n)}</p>' for n in notes]
    for caption, head, body in tables:
        parts += [f"<h2>{html.escape(caption)}</h2>", _table(body, head)]
    parts += ["<h2>What the names mean</h2>", _dl(DEFINITIONS)]
    parts += _charts(policies, series)
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _charts(policies: Sequence[str], series: Mapping[str, Mapping[str, Any]]) -> list[str]:
    parts = ["<h2>GPU allocation per pool over time</h2>"]
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
            "Waiting-time CDF (all workloads; log scale: most waits are short, some days)",
            cdfs,
            grid,
            y_max=1.0,
            x_label="waited at most (1 min and less at the left edge)",
            y_label="share of workloads",
            x_log=True,
        )
    )
    return parts
