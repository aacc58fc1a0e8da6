"""Held-but-idle GPUs in the simulator: the trace's idle model makes a run's tail idle, an
idleness rule lets waiting work take those GPUs, the reclaimed run ends there (its work was
done), and the summary counts GPU-hours held idle per team, what was reclaimed and what it
cost; the model draws from its own stream, so a seed's arrivals stay the same."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from gpucarve.config.policy_build import load_policy
from gpucarve.sim.run.baselines import without_idleness
from gpucarve.sim.run.metrics import summarize
from gpucarve.sim.run.records import SimConfig
from gpucarve.sim.run.runner import Simulator
from gpucarve.sim.traces.synthetic import generate, three_teams
from tests.engine.builders import policy, pool, queue, workload
from tests.paths import BUILTIN

RULE = {"activityBelow": 5, "warnAfterSeconds": 300, "reclaimAfterSeconds": 600}
P = policy(
    pools=[pool("h", "H100-SXM5-80GB", 1, 2)],
    cohorts=[{"name": "lab"}],
    queues=[
        queue("nb", {"h100-full": {"nominal": 0, "borrowingLimit": 2}}, "lab", idleness=RULE),
        queue("owner", {"h100-full": {"nominal": 2}}, cohort="lab"),
        queue("train", {"h100-full": {"nominal": 0, "borrowingLimit": 2}}, cohort="lab"),
    ],
    scheduling={"minRuntimeSeconds": 0},
)


def _run(p: Any) -> dict[str, Any]:
    """A notebook holds both GPUs for 10,000 s, idle after 1,000 s; a job asks for them at
    2,000 s for 500 s."""
    ws = [
        workload(p, "lab", "nb", gpus=2, duration=10_000),
        workload(p, "job", "train", gpus=2, duration=500, submit=2000),
    ]
    config = SimConfig(idle_after=(("nb/lab", 1000),), check_invariants=True)
    result = Simulator(p, ws, config=config).run()
    return summarize(result, window=(0, 12_000))


def test_the_rule_hands_idle_gpus_to_waiting_work_and_the_summary_counts_it() -> None:
    ruled, unruled = _run(P), _run(without_idleness(P))
    # idle from 1,000 s; reclaimed at 2,000 s when the job comes, not at 1,600 s (nobody waited)
    assert ruled["teams"]["nb"]["gpu_hours_held_idle"] == round(2 * 1000 / 3600, 2)
    assert unruled["teams"]["nb"]["gpu_hours_held_idle"] == 5.0  # 2 GPUs x 9,000 s
    assert (ruled["idle_reclaims"], unruled["idle_reclaims"]) == (1, 0)
    assert ruled["gpu_hours_idle_reclaimed"] == 4.44  # 2 GPUs x the 8,000 s it had left
    assert ruled["teams"]["train"]["wait_p95_s"] == 0.0
    assert unruled["teams"]["train"]["wait_p95_s"] == 8000.0
    # the reclaimed notebook's work was done: it counts as completed, not as preempted work
    assert ruled["completed"] == 2 and ruled["preemptions"] == 0
    assert ruled["gpu_hours_lost_to_preemption"] == 0.0


def test_idle_stretches_are_held_but_not_busy() -> None:
    ws = [workload(P, "lab", "nb", gpus=2, duration=4000)]
    busy = Simulator(P, ws, {"nb/lab": 80.0}).run()
    idle = Simulator(P, ws, {"nb/lab": 80.0}, SimConfig(idle_after=(("nb/lab", 1000),))).run()
    b, i = summarize(busy, {"nb/lab": 80.0}), summarize(idle, {"nb/lab": 80.0})
    assert b["allocation"] == i["allocation"] == 1.0
    assert b["sm_utilisation"] == 0.8 and i["sm_utilisation"] == 0.2  # busy a quarter of it
    assert b["gpu_busy"] == 0.8 and i["gpu_busy"] == 0.2
    assert "gpu_hours_held_idle" not in b and i["gpu_hours_held_idle"] == round(6000 / 3600, 2)


def test_the_idle_model_leaves_a_seeds_arrivals_as_they_were() -> None:
    p = load_policy(BUILTIN / "three-teams.yaml").policy
    scenario = three_teams(days=0.5)
    plain = dataclasses.replace(
        scenario,
        teams=tuple(
            dataclasses.replace(t, kinds=tuple(dataclasses.replace(k, idle=None) for k in t.kinds))
            for t in scenario.teams
        ),
    )
    modelled, unmodelled = generate(p, scenario, 7), generate(p, plain, 7)
    assert modelled.workloads == unmodelled.workloads and unmodelled.idle_after == {}
    notebooks = [w for w in modelled.workloads if modelled.kind[w.id] == "notebook"]
    idle = [w for w in notebooks if w.id in modelled.idle_after]
    assert 0 < len(idle) < len(notebooks)  # a share of the notebooks, nothing else
    assert set(modelled.idle_after) <= {w.id for w in notebooks}
    for w in idle:
        assert w.duration is not None
        assert 0.2 * w.duration - 1 <= modelled.idle_after[w.id] <= 0.6 * w.duration
    assert generate(p, scenario, 7).idle_after == modelled.idle_after


def test_a_trace_file_carries_the_idle_model_and_bad_values_name_their_line(
    tmp_path: Path,
) -> None:
    from gpucarve.core.problems import InvalidInput
    from gpucarve.sim.traces.trace_io import CSV_COLUMNS, load_trace

    p = load_policy(BUILTIN / "three-teams.yaml").policy
    head = ",".join(CSV_COLUMNS) + "\n"
    row = "nb-{n},notebooks,,,0,3600,1,,1,,,,,,,,,{idle}\n"
    f = tmp_path / "t.csv"
    f.write_text(head + row.format(n=1, idle=900) + row.format(n=2, idle=""))
    assert load_trace(f, p).idle_after == {"notebooks/nb-1": 900}
    j = tmp_path / "t.jsonl"
    j.write_text(
        '{"name": "nb", "namespace": "notebooks", "duration": 60, "idleAfter": 30, "podSets": '
        '[{"count": 1, "resources": {"limits": {"nvidia.com/gpu": 1}}}]}\n'
    )
    assert load_trace(j, p).idle_after == {"notebooks/nb": 30}
    for bad, says in (("-5", "not a whole number"), ("soon", "not a whole number")):
        f.write_text(head + row.format(n=1, idle=900) + row.format(n=2, idle=bad))
        with pytest.raises(InvalidInput) as caught:
            load_trace(f, p)
        (problem,) = caught.value.problems
        assert problem.line == 3 and "idle_after is" in problem.message and says in problem.message
    j.write_text(j.read_text().replace('"idleAfter": 30', '"idleAfter": true'))
    with pytest.raises(InvalidInput) as caught:
        load_trace(j, p)
    assert "idle_after is True" in caught.value.problems[0].message


def test_simulate_on_a_trace_file_reports_what_its_idle_model_holds(tmp_path: Path) -> None:
    import json

    from typer.testing import CliRunner

    from gpucarve.cli.main import app
    from gpucarve.sim.traces.trace_io import CSV_COLUMNS

    row = "nb-{n},notebooks,,,{t},7200,1,,1,,,,,,,,,{idle}\n"
    f = tmp_path / "t.csv"
    # figures count over the arrival window: the second arrives as the first's idle hour ends
    f.write_text(",".join(CSV_COLUMNS) + "\n" + row.format(n=1, t=0, idle=3600)
                 + row.format(n=2, t=7200, idle=""))  # fmt: skip
    args = ["simulate", "--policy", str(BUILTIN / "three-teams.yaml"), "--trace", str(f),
            "--compare", "gpucarve", "--json"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    ours = doc["results"]["gpucarve"]
    assert ours["teams"]["data-science"]["gpu_hours_held_idle"] == 1.0  # an idle hour
    assert doc["idleness"]["held_idle_gpu_hours"]["data-science"]["without_rules"] == 1.0
