"""Held-but-idle GPUs in the simulator: the trace's idle model makes a run's tail idle, an
idleness rule lets waiting work take those GPUs, the reclaimed run ends there (its work was
done), and the summary counts GPU-hours held idle per team, what was reclaimed and what it
cost; the model draws from its own stream, so a seed's arrivals stay the same."""

from __future__ import annotations

import dataclasses
from typing import Any

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
