"""`gpucarve simulate`: replay a seeded synthetic trace through the engine and report."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, Progress, TextColumn
from rich.table import Table
from rich.text import Text

from gpucarve.cli import idleness_out, recommend_out
from gpucarve.cli.common import (
    CatalogOption,
    OptionalPolicyFile,
    fail,
    one_policy,
    out_dir_or_exit,
    policy_file,
    policy_or_exit,
)
from gpucarve.cli.output import console, refuse
from gpucarve.core.cluster import build_cluster
from gpucarve.core.policy import Policy
from gpucarve.core.problems import InvalidInput, Problem
from gpucarve.core.snapshot import Snapshot
from gpucarve.core.workload import Workload
from gpucarve.dashboard.export import standalone
from gpucarve.dashboard.model import Frame
from gpucarve.dashboard.server import Board
from gpucarve.engine.decisions import CycleResult
from gpucarve.sim.recommend.search import Case
from gpucarve.sim.run import report
from gpucarve.sim.run.baselines import POLICIES
from gpucarve.sim.run.failures import from_rate, load_failures
from gpucarve.sim.run.inference_scaling import inference_load
from gpucarve.sim.run.metrics import is_dev, summarize, timelines
from gpucarve.sim.run.records import GpuFailure, SimConfig
from gpucarve.sim.run.runner import Simulator
from gpucarve.sim.traces.policy_scenario import is_three_teams, scenario_for
from gpucarve.sim.traces.synthetic import DAY, Scenario, generate
from gpucarve.sim.traces.trace_io import load_trace


def _hours(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _pct(v: float) -> str:
    return f"{v:.1%}"


ROWS: list[tuple[str, Any]] = [
    ("workloads completed", lambda s: f"{s['completed']} of {s['workloads']}"),
    ("never started", lambda s: str(s["never_started"])),
    ("GPU allocation (time-weighted)", lambda s: _pct(s["allocation"])),
    ("GPU busy (as DCGM's GPU utilisation)", lambda s: _pct(s["gpu_busy"])),
    ("GPU busy of the GPUs pods use", lambda s: _pct(s["gpu_busy_in_use"])),
    ("SM-weighted utilisation", lambda s: _pct(s["sm_utilisation"])),
    ("fragmentation (free, unusable by what waits)", lambda s: _pct(s["fragmentation"])),
    ("wait p50", lambda s: _hours(s["wait_p50_s"])),
    ("wait p95", lambda s: _hours(s["wait_p95_s"])),
    ("wait max", lambda s: _hours(s["wait_max_s"])),
    ("wait until last start p95", lambda s: _hours(s["wait_until_last_start_p95_s"])),
    ("completion time p95", lambda s: _hours(s["completion_p95_s"])),
    ("slowdown p95 (completion / run time)", lambda s: f"{s['slowdown_p95']:.2f}"),
    ("dev: time to first GPU p50", lambda s: _hours(s["dev_time_to_first_gpu_p50_s"])),
    ("dev: time to first GPU p95", lambda s: _hours(s["dev_time_to_first_gpu_p95_s"])),
    ("gang first-try success", lambda s: f"{_pct(s['gang_first_try_success'])} of {s['gangs']}"),
    (
        "GPU-hours held by incomplete gangs",
        lambda s: f"{s['gpu_hours_held_by_incomplete_gangs']:,.1f}",
    ),
    ("preemptions", lambda s: str(s["preemptions"])),
    ("GPU-hours lost to preemption", lambda s: f"{s['gpu_hours_lost_to_preemption']:,.1f}"),
    ("GPU failures", lambda s: str(s["gpu_failures"])),
    (
        "GPU back after a failure, mean h",
        lambda s: (
            "-"
            if s.get("gpu_failure_mean_hours_to_return") is None
            else f"{s['gpu_failure_mean_hours_to_return']:.2f}"
        ),
    ),
    ("GPU-hours lost to failures", lambda s: f"{s['gpu_hours_lost_to_failures']:,.1f}"),
    ("GPU-hours out of service", lambda s: f"{s['gpu_hours_out_of_service']:,.1f}"),
]


def _per_policy(
    results: dict[str, dict[str, Any]],
    title: str,
    label: str,
    key: str,
    fmt: Callable[[dict[str, Any]], str],
) -> report.Table:
    """One row per pool or queue (`key`), one column per policy ("-" where it has none)."""
    names = list(results)
    rows = []
    for row in results[names[-1]][key]:
        cells = []
        for n in names:
            entry = results[n][key].get(row)
            cells.append("-" if entry is None else fmt(entry))
        rows.append([row, *cells])
    return title, [label, *names], rows


def _table_data(results: dict[str, dict[str, Any]]) -> list[report.Table]:
    """Per pool, per team and idle by cause: the terminal's tables and the report's."""
    pools = _per_policy(
        results,
        "Pools: allocation / SM utilisation",
        "pool",
        "pools",
        lambda p: f"{_pct(p['allocation'])} / {_pct(p['sm_utilisation'])}",
    )
    teams = _per_policy(
        results,
        "Teams: wait p95 / GPU-hours / cost (USD)",
        "queue",
        "teams",
        lambda t: f"{_hours(t['wait_p95_s'])} / {t['gpu_hours']:,.0f} / {t['cost_usd']:,.0f}",
    )
    tables = [pools, teams, _idle_table(results)]
    fairness = _fairness_table(results)
    return tables if fairness is None else [*tables, fairness]


def _fairness_table(results: dict[str, dict[str, Any]]) -> report.Table | None:
    """Per cohort, pool and queue: share received / entitled over the run, and the worst
    hour's deviation; per pool Jain's index (mean over hours). None without cohorts."""
    names = list(results)
    first = results[names[-1]].get("fairness") or {}
    rows = []
    for cohort, pools in sorted(first.items()):
        for pool, figures in sorted(pools.items()):
            at = [(results[n].get("fairness") or {}).get(cohort, {}).get(pool) for n in names]
            rows.append(
                [f"{cohort} / {pool}: Jain's index, hourly mean"]
                + ["-" if f is None else f"{f['jain_mean']:.2f}" for f in at]
            )
            for queue in sorted(figures["queues"]):
                cells = []
                for f in at:
                    q = None if f is None else f["queues"].get(queue)
                    cells.append(
                        "-"
                        if q is None
                        else f"{_pct(q['share_received'])} / {_pct(q['share_entitled'])} "
                        f"({q['deviation_worst_hour']:.2f})"
                    )
                rows.append([f"{cohort} / {pool}: {queue}", *cells])
    if not rows:
        return None
    title = "Fairness: share received / entitled (worst hour's deviation)"
    return title, ["cohort / pool", *names], rows


def _rich(table: report.Table) -> Table:
    title, head, rows = table
    out = Table(title=title)
    out.add_column(head[0])
    for h in head[1:]:
        out.add_column(h, justify="right")
    for row in rows:
        out.add_row(*row)
    return out


def _tables(results: dict[str, dict[str, Any]]) -> list[Table]:
    names = list(results)
    overall = Table(title="Cluster, over the arrival window")
    overall.add_column("metric")
    for n in names:
        overall.add_column(n, justify="right")
    for label, fmt in ROWS:
        overall.add_row(label, *(fmt(results[n]) for n in names))
    return [overall, *(_rich(t) for t in _table_data(results))]


def _idle_table(results: dict[str, dict[str, Any]]) -> report.Table:
    """GPU-hours free while work waited, by cause (results.json's `idle_gpu_hours`)."""
    names = list(results)
    causes = sorted(
        {c for n in names for c in results[n]["idle_gpu_hours"]},
        key=lambda c: (c == "nothing-waiting", c),
    )
    rows = []
    for cause in causes:
        cells = [results[n]["idle_gpu_hours"].get(cause) for n in names]
        rows.append([cause, *("-" if v is None else f"{v:,.1f}" for v in cells)])
    title = "Idle GPU-hours by cause (free while work waited; then nothing waiting)"
    return title, ["cause", *names], rows


# The published case study the three-team example follows: exclusive GPUs -> MIG, time-slicing,
# Kueue quotas and gang scheduling.
CASE_STUDY = {"utilisation": (0.35, 0.72), "first_try": (0.62, 0.94), "dev_first_gpu_s": (900, 30)}


def case_study_line(results: dict[str, dict[str, Any]]) -> str:
    """How this run's kube-default -> gpucarve compares with the case study's before -> after.
    Their "GPU utilisation" is read two ways: busy over the GPUs pods hold (what per-pod DCGM
    dashboards show) and busy over every GPU, which the offered load bounds."""
    base, ours = results["kube-default"], results["gpucarve"]
    u0, u1 = CASE_STUDY["utilisation"]
    f0, f1 = CASE_STUDY["first_try"]
    d0, d1 = CASE_STUDY["dev_first_gpu_s"]
    held0, held1 = base["gpu_busy_in_use"], ours["gpu_busy_in_use"]
    util_gain = ours["gpu_busy"] / base["gpu_busy"] if base["gpu_busy"] else 0.0
    first = ours["gang_first_try_success"]
    dev = ours["dev_time_to_first_gpu_p95_s"]
    return (
        f"Against the published case study the three-team example follows (a start-up with a "
        f"25,000 CHF a month GPU budget moving from exclusive GPUs to MIG, time-slicing, "
        f"quotas and gangs: {_pct(u0)} -> {_pct(u1)} utilisation, first-try "
        f"{_pct(f0)} -> {_pct(f1)}, dev first GPU {_hours(d0)} -> {_hours(d1)}): "
        f"busy of GPUs in use {_pct(held0)} -> {_pct(held1)} "
        f"({(held1 - u1) * 100:+.1f} points from their {_pct(u1)}); busy of all GPUs "
        f"{_pct(base['gpu_busy'])} -> {_pct(ours['gpu_busy'])} (x{util_gain:.2f} against their "
        f"x{u1 / u0:.2f}; bounded by this trace's load: gpucarve runs "
        f"{_pct(ours['allocation'])} allocated); first-try {_pct(first)}, "
        f"{(first - f1) * 100:+.1f} points from their {_pct(f1)}; dev first GPU p95 "
        f"{_hours(dev)}, {dev - d1:+.0f} s from their {_hours(d1)}."
    )


def _headline(results: dict[str, dict[str, Any]]) -> list[str]:
    """gpucarve against kube-default, one figure a sentence."""
    base, ours = results["kube-default"], results["gpucarve"]
    return [
        f"Work kept GPUs busy {_pct(base['gpu_busy'])} of the time under kube-default and "
        f"{_pct(ours['gpu_busy'])} under gpucarve (SM-weighted utilisation "
        f"{_pct(base['sm_utilisation'])} -> {_pct(ours['sm_utilisation'])})",
        f"Waits: p95 {_hours(base['wait_p95_s'])} -> {_hours(ours['wait_p95_s'])}; dev work's "
        f"first GPU p95 {_hours(base['dev_time_to_first_gpu_p95_s'])} -> "
        f"{_hours(ours['dev_time_to_first_gpu_p95_s'])}",
        f"Gangs starting whole at the first try: {_pct(base['gang_first_try_success'])} -> "
        f"{_pct(ours['gang_first_try_success'])}; GPU-hours held by gangs waiting for their "
        f"missing pods {base['gpu_hours_held_by_incomplete_gangs']:,.1f} -> "
        f"{ours['gpu_hours_held_by_incomplete_gangs']:,.1f}",
        f"Work redone after preemption: {ours['gpu_hours_lost_to_preemption']:,.1f} GPU-hours "
        f"under gpucarve ({ours['preemptions']} evictions; kube-default never preempts)",
    ]


def _reading(results: dict[str, dict[str, Any]], days: float) -> list[str]:
    """What a reader would ask of this run's figures, answered from them."""
    base, ours = results["kube-default"], results["gpucarve"]
    span = f"the {days:g} days of arrivals" if days else "the trace's arrival window"
    out = [
        f"Figures cover {span}; the runs go on until the work is done. "
        "Time-sliced jobs slow down with the LUCID co-location fit (docs/simulator.md); MIG "
        "instances do not interfere."
    ]
    if ours["allocation"] < base["allocation"]:
        out.append(
            f"gpucarve's allocation ({_pct(ours['allocation'])}) is below kube-default's "
            f"({_pct(base['allocation'])}) because allocation counts GPUs held, not work done: "
            "kube-default gives every MIG, shared or fractional request a whole GPU and lets "
            f"gangs hold GPUs while they wait for their missing pods "
            f"({base['gpu_hours_held_by_incomplete_gangs']:,.1f} GPU-hours here). gpucarve "
            f"holds fewer GPUs and keeps {_pct(ours['gpu_busy_in_use'])} of the GPUs it uses "
            f"busy ({_pct(base['gpu_busy_in_use'])} under kube-default); it completed "
            f"{ours['completed']} of {ours['workloads']} workloads, kube-default "
            f"{base['completed']}."
        )
    if ours["sm_utilisation"] < base["sm_utilisation"]:
        out.append(
            f"SM-weighted utilisation is lower under gpucarve here ({_pct(ours['sm_utilisation'])} "
            f"against {_pct(base['sm_utilisation'])}): kube-default runs each small job on a "
            "whole GPU, where its utilisation counts against all of the GPU's SMs, while "
            "gpucarve gives it a MIG instance or a replica and counts only that slice's; and "
            "where work waits for quota (the idle table's quota causes), kube-default, which "
            "has none, runs it at once on GPUs other teams' quotas guarantee."
        )
    return out


def _failures(
    policy: Policy,
    path: Path | None,
    rate: float,
    repair_hours: float,
    window: tuple[int, int],
    seed: int,
) -> tuple[GpuFailure, ...]:
    if path is not None and rate:
        fail(InvalidInput("--gpu-failures", [Problem((), "two-failure-sources",
             "--gpu-failures and --gpu-failure-rate both given",
             "replay a list or draw at a rate, not both")]))  # fmt: skip
    try:
        if path is not None:
            return load_failures(str(path), build_cluster(policy))
        if rate:
            return from_rate(build_cluster(policy), rate, int(repair_hours * 3600), window[1], seed)
    except InvalidInput as exc:
        fail(exc)
    return ()


def simulate(
    file: OptionalPolicyFile = None,
    policy: Annotated[
        Path | None,
        typer.Option("--policy", help="Policy YAML file (default: the built-in example)."),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the synthetic trace.")] = 42,
    days: Annotated[
        float, typer.Option(help="Days of arrivals to generate.", min=0.01, max=60)
    ] = 2.0,
    load: Annotated[
        float,
        typer.Option(
            "--load",
            help="Multiply the synthetic teams' arrival rates (what if demand grows?).",
            min=0.1,
            max=20,
        ),
    ] = 1.0,
    out: Annotated[
        Path | None, typer.Option("--out", help="Write results.json and report.html here.")
    ] = Path("out"),
    as_json: Annotated[bool, typer.Option("--json", help="Print the results as JSON.")] = False,
    trace_file: Annotated[
        Path | None,
        typer.Option(
            "--trace",
            help="Replay this trace (gpucarve JSONL or CSV) instead of the synthetic one.",
        ),
    ] = None,
    lenient: Annotated[
        bool,
        typer.Option("--lenient", help="Skip bad trace rows (and count them) instead of stopping."),
    ] = False,
    policies: Annotated[
        list[str] | None,
        typer.Option("--compare", help="Policies to run: kube-default, static-quota, gpucarve."),
    ] = None,
    check_invariants: Annotated[
        bool,
        typer.Option(
            "--check-invariants",
            help="After every cycle check every rule (no slice twice, quotas and cohort limits, "
            "whole gangs, evictions only as allowed, shared memory); stop at the first broken.",
        ),
    ] = False,
    failure_file: Annotated[
        Path | None,
        typer.Option(
            "--gpu-failures",
            help="Replay these GPU failures: a CSV time_s,node,gpu,repair_s[,class] (a failed "
            "GPU takes no work until it is back; with a fault class, gpucarve drains and "
            "remedies it as gpuHealth says for the class, the baselines wait repair_s).",
        ),
    ] = None,
    failure_rate: Annotated[
        float,
        typer.Option(
            "--gpu-failure-rate",
            help="GPU failures per GPU per day, drawn from --seed with their fault classes "
            "(0: none).",
            min=0.0,
            max=1.0,
        ),
    ] = 0.0,
    repair_hours: Annotated[
        float,
        typer.Option(
            "--gpu-repair-hours",
            help="With --gpu-failure-rate: how long a person takes to repair a failed GPU "
            "(every failure under the baselines; under gpucarve, the classes that need the "
            "GPU serviced).",
            min=0.01,
            max=24 * 30,
        ),
    ] = 4.0,
    recommend: Annotated[
        bool,
        typer.Option(
            "--recommend",
            help="Search the policy options that change decisions (scheduling options, limits, "
            "MIG layouts, dynamic MIG, GPU-unit quotas) for the policy the policy's objective "
            "ranks first: derived on this trace (a --trace: its first two thirds), judged on "
            "--judge-seeds other seeds (a --trace: its last third); writes recommended.yaml "
            "and recommended.diff to --out.",
        ),
    ] = False,
    derive_seeds: Annotated[
        int,
        typer.Option(
            "--derive-seeds",
            help="With --recommend on the synthetic trace: derive on --seed and this many "
            "seeds in all (the next ones).",
            min=1,
            max=50,
        ),
    ] = 1,
    judge_seeds: Annotated[
        int,
        typer.Option(
            "--judge-seeds",
            help="With --recommend on the synthetic trace: judge on this many seeds after the "
            "derive seeds.",
            min=1,
            max=50,
        ),
    ] = 2,
    jobs: Annotated[
        int | None,
        typer.Option(
            "--jobs",
            help="With --recommend: replays run on this many of this machine's cores "
            "(default: all of them).",
            min=1,
            max=1024,
        ),
    ] = None,
    ray: Annotated[
        str | None,
        typer.Option(
            "--ray",
            help="With --recommend: run the replays as tasks on the Ray cluster at this address "
            "(local: one started on this machine for the run; auto: the one this machine "
            "belongs to). Its nodes need this version of gpucarve.",
        ),
    ] = None,
    catalog: CatalogOption = None,
) -> None:
    """Replay a seeded three-team synthetic workload on POLICY under kube-default,
    static-quota and gpucarve, and compare allocation, SM utilisation, waits, dev time to first
    GPU, gang first-try success, GPU-hours held by incomplete gangs, preemptions and cost per
    team."""
    policy = one_policy(file, policy)  # as validate and plan take it: FILE or --policy
    loaded = policy_or_exit(policy_file(policy), catalog)
    if out is not None:
        out_dir_or_exit(out, "--out")
    names = _names(policies, recommend)
    try:
        if trace_file is not None:
            workloads, utilisation, idle_after = _trace_workloads(
                trace_file, loaded.policy, lenient
            )
            case_study = False
        else:
            source = str(policy or "the policy")
            scenario = _scenario(loaded.policy, days, load, source)
            case_study = is_three_teams(scenario)
            workloads, utilisation, idle_after = _synthetic_trace(
                loaded.policy, scenario, days, seed
            )
            if not workloads:
                raise InvalidInput(
                    source,
                    [
                        Problem(
                            (),
                            "nothing-to-simulate",
                            f"{days:g} days of the synthetic scenario hold no arrival",
                            "simulate more --days, or a higher --load",
                        )
                    ],
                )
    except InvalidInput as exc:
        fail(exc)
    if trace_file is not None:
        window = (workloads[0].submit_time, max(w.submit_time for w in workloads) + 1)
    else:
        window = (0, int(days * DAY))
    gpu_failures = _failures(loaded.policy, failure_file, failure_rate, repair_hours, window, seed)
    config = SimConfig(
        check_invariants=check_invariants,
        gpu_failures=gpu_failures,
        idle_after=tuple(sorted(idle_after.items())),
    )
    board = _board(out)
    results, series = _run_all(names, loaded.policy, workloads, utilisation, config, window, board)
    doc: dict[str, Any] = {"policy": loaded.policy.name, "results": results}
    if "gpucarve" in results and idleness_out.has_rules(loaded.policy, config):
        dev = {w.id for w in workloads if is_dev(w)}
        doc["idleness"] = idleness_out.effect(
            loaded.policy, workloads, utilisation, config, window, dev, results["gpucarve"]
        )
    doc.update(_failure_source(failure_file, failure_rate, repair_hours))
    doc.update(_source(trace_file, seed, days, load))
    if recommend:
        doc["demand_bound_gpus"] = recommend_out.bound_table(
            loaded.policy, workloads, window, results["gpucarve"], as_json
        )
        derive, judged_on = _cases(
            loaded.policy, (workloads, utilisation), window, trace_file, seed, days, load,
            (derive_seeds, judge_seeds),
        )  # fmt: skip
        doc["recommendation"] = recommend_out.recommend(
            loaded, derive, judged_on, catalog or [], out, jobs or os.cpu_count() or 1, ray,
            as_json,
        )  # fmt: skip
    if out is not None:
        what = (
            f"trace {trace_file.name}" if trace_file else f"seed {seed}, {days:g} days of arrivals"
        )
        title = f"gpucarve simulation: {loaded.policy.name}, {what}"
        drawn = _write(out, doc, names, series, title, case_study, board)
        # on standard error: standard output may carry --json
        wrote = f"wrote {out / 'results.json'} and {out / 'report.html'}"
        if drawn:
            wrote += f" (gpucarve's last cycle on the dashboard's pages: {out / 'dashboard.html'})"
        if recommend:
            wrote += f" (and the recommended policy, recommended.yaml and .diff, in {out})"
        console(stderr=True).print(Text(wrote))
    if as_json:
        typer.echo(json.dumps(doc, indent=2, sort_keys=True, allow_nan=False))
        return
    c = console()
    for table in _tables(results):
        c.print(table)
    if "idleness" in doc:
        c.print(_rich(idleness_out.table(doc["idleness"])))
    if "kube-default" in results and "gpucarve" in results:
        _print_headline(results, case_study)


def _print_headline(results: dict[str, dict[str, Any]], case_study: bool) -> None:
    c = console()
    c.print(Text("gpucarve against kube-default:"))
    for line in _headline(results):
        c.print(Text(f"- {line}"))
    if case_study:
        c.print(Text(case_study_line(results)))


def _names(policies: list[str] | None, recommend: bool) -> list[str]:
    """The policies to run, or a refusal naming the option and the fix."""
    names = policies or list(POLICIES)
    unknown = [n for n in names if n not in POLICIES]
    if unknown:
        refuse("--compare", "unknown-policy", f"no policy {', '.join(unknown)}",
               f"use one of {', '.join(POLICIES)}")  # fmt: skip
    if recommend and "gpucarve" not in names:
        refuse("--recommend", "needs-gpucarve", "--recommend replays gpucarve's run, which "
               "--compare leaves out", "add --compare gpucarve")  # fmt: skip
    return names


def _cases(
    policy: Policy,
    trace: tuple[list[Workload], dict[str, float]],
    window: tuple[int, int],
    trace_file: Path | None,
    seed: int,
    days: float,
    load: float,
    seeds: tuple[int, int],
) -> tuple[list[Case], list[Case]]:
    """The traces `--recommend` derives on and judges on: `seeds` (derive, judge) synthetic
    seeds from `seed` on, the judge seeds after the derive seeds; a replayed trace's first two
    thirds (by arrival) and its last third, each replayed from an empty cluster (a trace too
    short to split is judged on itself, and the report says the evidence is thin)."""
    workloads, utilisation = trace
    if trace_file is None:
        scenario = _scenario(policy, days, load, "the policy")
        made = [Case(f"seed {seed}", tuple(workloads), utilisation, window)]
        for s in range(seed + 1, seed + sum(seeds)):
            ws, util = _synthetic_workloads(policy, scenario, days, s)
            made.append(Case(f"seed {s}", tuple(ws), util, window))
        return made[: seeds[0]], made[seeds[0] :]
    start, end = window
    split = start + (end - start) * 2 // 3
    early = tuple(w for w in workloads if w.submit_time < split)
    late = tuple(w for w in workloads if w.submit_time >= split)
    whole = Case(f"{trace_file.name}", tuple(workloads), utilisation, window)
    if not early or not late:
        return [whole], [whole]
    cut, whole_days = (split - start) / DAY, (end - start) / DAY
    return (
        [Case(f"{trace_file.name} days 0-{cut:.1f}", early, utilisation, (start, split))],
        [Case(f"{trace_file.name} days {cut:.1f}-{whole_days:.1f}", late, utilisation,
              (split, end))],
    )  # fmt: skip


def _failure_source(
    failure_file: Path | None, failure_rate: float, repair_hours: float
) -> dict[str, Any]:
    """What results.json says the GPU failures came from (nothing without failures)."""
    if failure_file is not None:
        return {"gpu_failures": str(failure_file)}
    if failure_rate:
        return {"gpu_failures": {"per_gpu_day": failure_rate, "repair_hours": repair_hours}}
    return {}


def _source(trace_file: Path | None, seed: int, days: float, load: float) -> dict[str, Any]:
    """What results.json says the work came from."""
    if trace_file is not None:
        return {"trace": str(trace_file)}
    return {"seed": seed, "days": days, **({"load": load} if load != 1.0 else {})}


def _trace_workloads(
    trace_file: Path, policy: Policy, lenient: bool
) -> tuple[list[Workload], dict[str, float], dict[str, int]]:
    loaded_trace = load_trace(trace_file, policy, lenient)
    if loaded_trace.skipped:
        console(stderr=True).print(
            Text(f"{trace_file}: skipped {loaded_trace.skipped} bad rows", style="yellow")
        )
    t = loaded_trace
    return list(t.workloads), dict(t.utilisation), dict(t.idle_after)


def _scenario(policy: Policy, days: float, load: float, source: str) -> Scenario:
    scenario = scenario_for(policy, days)
    if not scenario.teams:
        raise InvalidInput(
            source,
            [
                Problem(
                    ("queues",),
                    "nothing-to-simulate",
                    "no queue has nominal quota, so no synthetic work can be made",
                    "add queues with quota, or replay a trace with --trace",
                )
            ],
        )
    if load != 1.0:
        teams = tuple(
            dataclasses.replace(t, arrivals_per_hour=t.arrivals_per_hour * load)
            for t in scenario.teams
        )
        scenario = dataclasses.replace(scenario, teams=teams)
    return scenario


def _synthetic_workloads(
    policy: Policy, scenario: Scenario, days: float, seed: int
) -> tuple[list[Workload], dict[str, float]]:
    return _synthetic_trace(policy, scenario, days, seed)[:2]


def _synthetic_trace(
    policy: Policy, scenario: Scenario, days: float, seed: int
) -> tuple[list[Workload], dict[str, float], dict[str, int]]:
    """Workloads, their utilisation, and the trace's idle model (SimConfig.idle_after)."""
    trace = generate(policy, scenario, seed)
    workloads, utilisation = list(trace.workloads), dict(trace.utilisation)
    if policy.autoscaling:
        # the policy's inference Deployments, scaling as their HPAs would
        replicas, busy = inference_load(policy, int(days * DAY), seed)
        workloads = sorted([*workloads, *replicas], key=lambda w: (w.submit_time, w.id))
        utilisation = {**utilisation, **busy}
    return workloads, utilisation, dict(trace.idle_after)


def _run_all(
    names: list[str],
    policy: Policy,
    workloads: list[Workload],
    utilisation: dict[str, float],
    config: SimConfig,
    window: tuple[int, int],
    board: Board | None = None,
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """Each policy's run over the same workloads, with a progress bar on standard error;
    `board` is shown gpucarve's cycles up to the end of the arrival window."""
    dev = {w.id for w in workloads if is_dev(w)}
    results: dict[str, dict[str, Any]] = {}
    series: dict[str, dict[str, Any]] = {}
    err = console(stderr=True)
    for name in names:
        make_policy, make_workloads = POLICIES[name]
        # gpucarve drains and remedies a failing GPU by its fault class; the baselines have
        # no such agent: every failure waits for a person
        run_config = (
            dataclasses.replace(config, gpu_health=policy.gpu_health)
            if name == "gpucarve"
            else config
        )
        sim = Simulator(make_policy(policy), make_workloads(workloads), utilisation, run_config)
        if board is not None and name == "gpucarve":
            sim.observers.append(partial(_show, board, window[1]))
        with Progress(
            TextColumn(f"simulating {name}"),
            BarColumn(),
            TextColumn("{task.description}"),
            console=err,
            transient=True,
            disable=not err.is_terminal,  # piped: no bar, and no blank line where it was
        ) as bar:
            task = bar.add_task("", total=len(workloads))

            def tick(now: int, done: int) -> None:
                bar.update(task, completed=done, description=f"t={now / 3600:.1f} h, {done} done")  # noqa: B023

            result = sim.run(progress=tick)
        results[name] = summarize(result, utilisation, window, dev, policy)
        series[name] = timelines(result, window)
    return results, series


def _board(out: Path | None) -> Board | None:
    """What dashboard.html will show, where the run writes its files."""
    return None if out is None else Board()


def _show(board: Board, until: int, snapshot: Snapshot, result: CycleResult) -> None:
    if result.now <= until:
        board.show(Frame(snapshot, result), f"t = {result.now / 3600:.1f} h of the simulation")


def _write(
    out: Path,
    doc: dict[str, Any],
    names: list[str],
    series: dict[str, dict[str, Any]],
    title: str,
    case_study: bool,
    board: Board | None = None,
) -> bool:
    """results.json and report.html in `out`, and dashboard.html from `board` (gpucarve's
    last cycle of the arrival window on the live dashboard's pages); whether it wrote that."""
    results = doc["results"]
    (out / "results.json").write_text(
        json.dumps(doc, indent=2, sort_keys=True, allow_nan=False) + "\n"
    )
    summary: list[str] = []
    notes: list[str] = []
    if {"kube-default", "gpucarve"} <= set(results):
        summary = _headline(results)
        if case_study:
            summary.append(case_study_line(results))
        notes = _reading(results, float(doc.get("days", 0) or 0))
    rows = [(label, [fmt(results[n]) for n in names]) for label, fmt in ROWS]
    dashboard = board is not None and board.latest() is not None
    if board is not None and dashboard:
        (out / "dashboard.html").write_text(standalone(board, f"{title}: gpucarve"))
    page = report.render(
        title, rows, names, summary, series, notes, _table_data(results), dashboard
    )
    (out / "report.html").write_text(page)
    return dashboard
