"""`gpucarve simulate --recommend`: replay each proposal of `sim.recommend` on the trace it came
from and on one it did not, beside the policy as it is; print and save what each team gains."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml
from rich.table import Table
from rich.text import Text

from gpucarve.cli.output import console
from gpucarve.config.policy_build import LoadedPolicy, load_policy_text
from gpucarve.core.policy import Policy
from gpucarve.core.problems import InvalidInput
from gpucarve.core.workload import Workload
from gpucarve.sim.recommend.demand_bound import demand_bound
from gpucarve.sim.recommend.proposals import Proposal, limits, mig_layout, scheduling
from gpucarve.sim.run.metrics import summarize
from gpucarve.sim.run.records import SimConfig
from gpucarve.sim.run.runner import Simulator

Trace = tuple[list[Workload], dict[str, float]]
HOUR = 3600.0


def _run(policy: Policy, trace: Trace, window: tuple[int, int]) -> dict[str, Any]:
    workloads, utilisation = trace
    result = Simulator(policy, workloads, utilisation, SimConfig()).run()
    return summarize(result, utilisation, window)


def _figures(s: dict[str, Any]) -> dict[str, Any]:
    return {
        "pools": {p: v["allocation"] for p, v in s["pools"].items()},
        "wait_p95_h": {t: round(v["wait_p95_s"] / HOUR, 2) for t, v in s["teams"].items()},
        "idle_while_waiting_gpu_hours": round(
            sum(h for c, h in s["idle_gpu_hours"].items() if c != "nothing-waiting"), 1
        ),
        "gpu_hours_lost_to_preemption": s["gpu_hours_lost_to_preemption"],
        "wait_until_last_start_p95_h": {
            t: round(v["wait_until_last_start_p95_s"] / HOUR, 2) for t, v in s["teams"].items()
        },
    }


def bound_table(
    policy: Policy,
    workloads: Sequence[Workload],
    window: tuple[int, int],
    run: dict[str, Any],
    quiet: bool,
) -> dict[str, dict[str, float]]:
    """Print and return, per pool, what the run held against the demand bound (GPUs)."""
    bound = demand_bound(policy, workloads, window)
    t = Table(
        title="Demand bound: GPUs held on average (as allocation counts them) against the most "
        "the pool's work could have held (perfect packing, no quota, first come first served "
        "with backfill)"
    )
    for col in ("pool", "held", "at most", "of the bound"):
        t.add_column(col, justify="left" if col == "pool" else "right")
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


def recommend(
    loaded: LoadedPolicy,
    derived: Trace,
    before: dict[str, Any],
    held_out: Callable[[], Trace] | None,
    window: tuple[int, int],
    catalog: Sequence[Path],
    out: Path | None,
    quiet: bool = False,
) -> list[dict[str, Any]]:
    """Replay the proposals; print a table per proposal (on stderr when `quiet`: stdout
    then carries JSON) and return what results.json keeps."""
    c = console(stderr=quiet)
    doc = loaded.document.data if loaded.document is not None else None
    idle = {p: v.get("idle_gpu_hours", {}) for p, v in before["pools"].items()}
    proposals = (
        []
        if doc is None
        else [
            *mig_layout(doc, loaded.policy, derived[0], idle),
            *limits(doc, loaded.policy, idle),
            *scheduling(doc, before),
        ]
    )
    if not proposals:
        c.print(
            Text(
                "recommend: nothing to propose: no pool idled for its MIG layout or while gangs "
                "waited for room, and preemption destroyed little (see the idle table); what "
                "is left is bound by demand or quota"
            )
        )
        return []
    other = held_out() if held_out is not None else None
    base_other = _run(loaded.policy, other, window) if other is not None else None
    kept = []
    for prop in proposals:
        text = yaml.safe_dump(prop.doc, sort_keys=False)
        try:
            policy = load_policy_text(text, prop.name, catalog).policy
        except InvalidInput as exc:
            c.print(Text(f"recommend: {prop.name}: the proposal does not validate ({exc})"))
            continue
        entry = {
            "proposal": prop.name,
            "why": prop.why,
            "derived_from": {
                "before": _figures(before),
                "after": _figures(_run(policy, derived, window)),
            },
        }
        if other is not None and base_other is not None:
            entry["held_out"] = {
                "before": _figures(base_other),
                "after": _figures(_run(policy, other, window)),
            }
        kept.append(entry)
        c.print(_table(entry))
        if out is not None:
            _save(out, doc, prop, text)
    return kept


def _table(entry: dict[str, Any]) -> Table:
    runs = [("trace it came from", entry["derived_from"])]
    if "held_out" in entry:
        runs.append(("another trace", entry["held_out"]))
    t = Table(title=f"Recommendation: {entry['proposal']}\n{entry['why']}")
    t.add_column("figure")
    for label, _ in runs:
        t.add_column(f"{label}: before → after", justify="right")
    first = runs[0][1]["before"]
    for pool in first["pools"]:
        t.add_row(f"{pool} allocated", *(
            f"{r['before']['pools'][pool]:.1%} → {r['after']['pools'][pool]:.1%}" for _, r in runs
        ))  # fmt: skip
    for team in first["wait_p95_h"]:
        t.add_row(f"{team} wait p95", *(
            f"{r['before']['wait_p95_h'][team]:.1f} h → {r['after']['wait_p95_h'][team]:.1f} h"
            for _, r in runs
        ))  # fmt: skip
    t.add_row("GPU-hours lost to preemption", *(
        f"{r['before']['gpu_hours_lost_to_preemption']:,.0f} → "
        f"{r['after']['gpu_hours_lost_to_preemption']:,.0f}" for _, r in runs
    ))  # fmt: skip
    t.add_row("GPU-hours idle while work waited", *(
        f"{r['before']['idle_while_waiting_gpu_hours']:,.0f} → "
        f"{r['after']['idle_while_waiting_gpu_hours']:,.0f}" for _, r in runs
    ))  # fmt: skip
    return t


def _save(out: Path, doc: Any, prop: Proposal, text: str) -> None:
    slug = re.sub(r"[^a-z0-9]+", "-", prop.name.lower()).strip("-")
    (out / f"recommended-{slug}.yaml").write_text(text)
    before = yaml.safe_dump(doc, sort_keys=False).splitlines(keepends=True)
    diff = difflib.unified_diff(
        before, text.splitlines(keepends=True), "policy (as read)", f"recommended ({prop.name})"
    )
    (out / f"recommended-{slug}.diff").write_text("".join(diff))
