"""`gpucarve simulate --recommend`: run the search of `sim.recommend.search` (derive on some
traces, judge on others), print the path, the ranking and the chosen policy's trade per team,
and save the chosen policy with its diff."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from rich.table import Table
from rich.text import Text

from gpucarve.cli.output import console, refuse
from gpucarve.config.policy_build import LoadedPolicy, load_policy_text
from gpucarve.core.policy import Policy
from gpucarve.core.problems import InvalidInput, errors
from gpucarve.core.workload import Workload
from gpucarve.sim.recommend.demand_bound import demand_bound, wait_alone_p95
from gpucarve.sim.recommend.executors import RayUnavailable, evaluator
from gpucarve.sim.recommend.search import (
    Case,
    Judged,
    Step,
    Verdict,
    bounds,
    judge,
    search,
)

HOUR = 3600.0
# judge traces this short in all, or this few, make the evidence thin: the report says so
THIN_DAYS = 2.0
THIN_CASES = 2


def _table(title: str, columns: Sequence[str]) -> Table:
    """A table whose first column (the name of a row) is left-aligned, the figures right."""
    t = Table(title=title)
    for i, col in enumerate(columns):
        t.add_column(col, justify="left" if i == 0 else "right")
    return t


def bound_table(
    policy: Policy,
    workloads: Sequence[Workload],
    window: tuple[int, int],
    run: dict[str, Any],
    quiet: bool,
) -> dict[str, dict[str, float]]:
    """Print and return, per pool, what the run held against the demand bound (GPUs)."""
    bound = demand_bound(policy, workloads, window)
    t = _table(
        "Demand bound: GPUs held on average (as allocation counts them) against the most "
        "the pool's work could have held (perfect packing, no quota, first come first served "
        "with backfill)",
        ("pool", "held", "at most", "of the bound"),
    )
    out: dict[str, dict[str, float]] = {}
    for pool, most in bound.items():
        figures = run["pools"].get(pool)
        if figures is None:
            continue
        held = round(figures["allocation"] * figures["gpus"], 2)
        out[pool] = {"held": held, "at_most": most}
        share = f"{held / most:.0%}" if most else "-"
        t.add_row(pool, f"{held:.1f}", f"{most:.1f}", share)
    console(stderr=quiet).print(t)
    return out


def _loader(
    name: str, catalog: Sequence[Path]
) -> Callable[[Mapping[str, Any]], tuple[str, Policy] | str]:
    def load(doc: Mapping[str, Any]) -> tuple[str, Policy] | str:
        text = yaml.safe_dump(dict(doc), sort_keys=False)
        try:
            return text, load_policy_text(text, name, catalog).policy
        except InvalidInput as exc:
            return "; ".join(
                f"{'.'.join(map(str, e.path))} [{e.code}] {e.message}" for e in errors(exc.problems)
            )

    return load


def recommend(
    loaded: LoadedPolicy,
    derive: Sequence[Case],
    judged_on: Sequence[Case],
    catalog: Sequence[Path],
    out: Path | None,
    jobs: int,
    ray: str | None,
    quiet: bool = False,
) -> dict[str, Any]:
    """Search, judge and report; print on stderr when `quiet` (stdout then carries JSON) and
    return what results.json keeps under `recommendation`."""
    c = console(stderr=quiet)
    doc = loaded.document.data if loaded.document is not None else None
    if doc is None:
        c.print(Text("recommend: the policy was not read from a document: nothing to change"))
        return {}
    load = _loader("recommended policy", catalog)
    objective = loaded.policy.objective
    cases = {k.key: k for k in [*derive, *judged_on]}
    progress = console(stderr=True)
    try:
        with evaluator(list(cases.values()), [str(p) for p in catalog], jobs, ray) as ev:
            path = search(doc, load, objective, derive, ev, lambda m: progress.print(Text(m)))
            progress.print(
                Text(f"recommend: judging {len(path)} step(s) on {len(judged_on)} trace(s)")
            )
            ranked = judge(path, objective, judged_on, ev)
            replays = ev.replays
    except RayUnavailable as exc:
        fix = ("start Ray (ray start --head) and give its address, --ray local for a cluster "
               "of this machine's cores, or leave --ray out")  # fmt: skip
        refuse("--ray", "ray-unavailable", str(exc), fix)
    chosen = ranked[0]
    base = next(j for j in ranked if not j.step.candidate.changes)
    c.print(_path_table(path, objective.minimize.value))
    c.print(_judge_table(ranked, len(judged_on), objective.minimize.value))
    bound = _bounds(loaded.policy, judged_on)
    c.print(_trade_table(chosen, base, loaded.policy, judged_on, bound))
    reach = _reach(loaded.policy, judged_on)
    if reach:
        c.print(_reach_table(loaded.policy, reach))
    evidence = _evidence(derive, judged_on, chosen)
    c.print(Text(f"recommend: {chosen.step.candidate.name} — {evidence}"))
    if out is not None and chosen.step.candidate.changes:
        _save(out, doc, chosen.step.candidate.name, chosen.step.text)
    return {
        "objective": {
            "minimize": objective.minimize.value,
            "wait_p95_s": dict(objective.wait_p95_s),
            "unnamed_wait_growth": objective.unnamed_growth,
        },
        "derived_on": [k.key for k in derive],
        "judged_on": [k.key for k in judged_on],
        "replays": replays,
        "path": [_step_doc(s) for s in path],
        "judged": [_judged_doc(j, base) for j in ranked],
        "chosen": chosen.step.candidate.name,
        "changes": [ch.label for ch in chosen.step.candidate.changes],
        "evidence": evidence,
        "demand_bound_gpus": bound,
        "wait_alone_p95_h": {
            q: [None if v is None else round(v / HOUR, 2) for v in vs] for q, vs in reach.items()
        },
    }


def _verdict_doc(v: Verdict) -> dict[str, Any]:
    return {"objective_gpu_hours": v.objective, "hours_past_wait_bounds": v.excess_h,
            "queues_past_bounds": list(v.past)}  # fmt: skip


def _step_doc(s: Step) -> dict[str, Any]:
    return {
        "policy": s.candidate.name,
        "why": [ch.why for ch in s.candidate.changes],
        "derived": _verdict_doc(s.derived),
        "round_ranking": [{"change": n, **_verdict_doc(v)} for n, v in s.ranked],
    }


def _mean(values: Sequence[float]) -> float:
    return round(sum(values) / len(values), 3) if values else 0.0


def _judged_doc(j: Judged, base: Judged) -> dict[str, Any]:
    queues = sorted(j.figures[0].wait_p95_s) if j.figures else []
    return {
        "policy": j.step.candidate.name,
        **_verdict_doc(j.verdict),
        "holds_on": j.holds_on,
        "gpu_hours_lost_to_preemption": _mean([f.lost for f in j.figures]),
        "idle_while_waiting_gpu_hours": _mean([f.idle for f in j.figures]),
        "wait_p95_h": {
            q: round(_mean([f.wait_p95_s[q] for f in j.figures]) / HOUR, 2) for q in queues
        },
        "wait_until_last_start_p95_h": {
            q: round(_mean([f.last_start_p95_s[q] for f in j.figures]) / HOUR, 2) for q in queues
        },
        "held_gpus": {p: _mean([f.held[p] for f in j.figures]) for p in sorted(j.figures[0].held)}
        if j.figures
        else {},
    }


def _bounds(policy: Policy, cases: Sequence[Case]) -> dict[str, float]:
    """Per pool, the demand bound (GPUs) averaged over the judge cases."""
    per = [demand_bound(policy, list(k.workloads), k.window) for k in cases]
    pools = sorted({p for b in per for p in b})
    return {p: _mean([b.get(p, 0.0) for b in per]) for p in pools}


def _reach(policy: Policy, cases: Sequence[Case]) -> dict[str, list[float | None]]:
    """Per queue the objective bounds, its wait p95 alone with its pools on each judge case
    (`wait_alone_p95`: no policy does better there)."""
    return {
        q: [wait_alone_p95(policy, k.workloads, q, k.window[1]) for k in cases]
        for q in sorted(policy.objective.wait_p95_s)
    }


def _reach_table(policy: Policy, reach: Mapping[str, Sequence[float | None]]) -> Table:
    t = _table(
        "Stated wait bounds against the least wait p95 each queue's work could have had "
        "with its pools to itself (others' work gone, perfect packing, the best of three "
        "orders), per judge trace: a bound below it is out of reach there short of more GPUs",
        ("queue", "bound", "alone, per judge trace", "within reach"),
    )
    for q, values in reach.items():
        bound = policy.objective.wait_p95_s[q]
        known = [v for v in values if v is not None]
        t.add_row(
            q,
            f"{bound / HOUR:.2f} h",
            ", ".join("-" if v is None else f"{v / HOUR:.2f} h" for v in values),
            f"{sum(v <= bound for v in known)} of {len(known)}",
        )
    return t


def _path_table(path: Sequence[Step], minimize: str) -> Table:
    t = Table(title=f"Search on the derive trace(s): the best change of each round ({minimize})")
    for col in ("step", "policy", minimize, "hours past wait bounds"):
        t.add_column(col, justify="right" if col != "policy" else "left")
    for i, s in enumerate(path):
        t.add_row(str(i), s.candidate.name, f"{s.derived.objective:,.1f}", _past(s.derived))
    return t


def _past(v: Verdict) -> str:
    return "within" if v.within else f"{v.excess_h:,.1f} ({', '.join(v.past)})"


def _judge_table(ranked: Sequence[Judged], n: int, minimize: str) -> Table:
    t = Table(title=f"Ranked on {n} judge trace(s) no step was chosen on")
    for col in ("rank", "policy", minimize, "hours past wait bounds", "holds on"):
        t.add_column(col, justify="right" if col != "policy" else "left")
    for i, j in enumerate(ranked, 1):
        t.add_row(str(i), j.step.candidate.name, f"{j.verdict.objective:,.1f}", _past(j.verdict),
                  f"{j.holds_on} of {n}")  # fmt: skip
    return t


def _trade_table(
    chosen: Judged, base: Judged, policy: Policy, cases: Sequence[Case], bound: Mapping[str, float]
) -> Table:
    """The chosen policy against the policy as read, per team and pool, on the judge cases."""
    t = _table(
        f"Recommended: {chosen.step.candidate.name} (judge traces, mean)",
        ("figure", "as read", "recommended", "bound"),
    )
    limit = [bounds(policy.objective, f) for f in base.figures]
    for q in sorted(base.figures[0].wait_p95_s) if base.figures else []:
        t.add_row(
            f"{q} wait p95",
            f"{_mean([f.wait_p95_s[q] for f in base.figures]) / HOUR:.1f} h",
            f"{_mean([f.wait_p95_s[q] for f in chosen.figures]) / HOUR:.1f} h",
            f"{_mean([b[q] for b in limit]) / HOUR:.1f} h",
        )
        t.add_row(
            f"{q} wait until last start p95",
            f"{_mean([f.last_start_p95_s[q] for f in base.figures]) / HOUR:.1f} h",
            f"{_mean([f.last_start_p95_s[q] for f in chosen.figures]) / HOUR:.1f} h",
            "",
        )
    t.add_row("GPU-hours lost to preemption", f"{_mean([f.lost for f in base.figures]):,.1f}",
              f"{_mean([f.lost for f in chosen.figures]):,.1f}", "")  # fmt: skip
    t.add_row("GPU-hours idle while work waited", f"{_mean([f.idle for f in base.figures]):,.1f}",
              f"{_mean([f.idle for f in chosen.figures]):,.1f}", "")  # fmt: skip
    for pool, most in bound.items():
        held = [_mean([f.held.get(pool, 0.0) for f in j.figures]) for j in (base, chosen)]
        t.add_row(f"{pool} GPUs held (of its demand bound)",
                  *(f"{h:.1f} ({h / most:.0%})" if most else f"{h:.1f}" for h in held),
                  f"{most:.1f}")  # fmt: skip
    return t


def _evidence(derive: Sequence[Case], judged_on: Sequence[Case], chosen: Judged) -> str:
    days = sum(k.days for k in judged_on)
    said = (
        f"derived on {', '.join(k.key for k in derive)}, judged on "
        f"{', '.join(k.key for k in judged_on)} ({days:.1f} days): "
    )
    if not chosen.step.candidate.changes:
        said += "no change the search found holds on the judge traces; keep the policy as read"
    else:
        said += f"ranks first there, at least as good as the policy as read on {chosen.holds_on} "
        said += f"of {len(judged_on)}"
    if days < THIN_DAYS or len(judged_on) < THIN_CASES:
        said += (
            f" (thin evidence: fewer than {THIN_CASES} judge traces or {THIN_DAYS:g} days; "
            "judge on more seeds or a longer history before applying it)"
        )
    return said


def _save(out: Path, doc: Any, name: str, text: str) -> None:
    (out / "recommended.yaml").write_text(text)
    before = yaml.safe_dump(doc, sort_keys=False).splitlines(keepends=True)
    diff = difflib.unified_diff(
        before, text.splitlines(keepends=True), "policy (as read)", f"recommended ({name})"
    )
    (out / "recommended.diff").write_text("".join(diff))
