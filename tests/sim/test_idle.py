"""GPU-hours free while work waited, by cause, over a simulated run (the engine's accounting
summed over time): they add up to each pool's free GPU-hours, and on the three-team example at
twice its load the production pool's largest cause is the MIG layout nobody asks for."""

from __future__ import annotations

import dataclasses
from typing import Any

from gpucarve.config.examples import POLICY, example_path
from gpucarve.config.policy_build import load_policy
from gpucarve.sim.run.metrics import summarize
from gpucarve.sim.run.records import SimConfig
from gpucarve.sim.run.runner import Simulator
from gpucarve.sim.traces.policy_scenario import scenario_for
from gpucarve.sim.traces.synthetic import DAY, generate
from tests.engine.builders import policy, pool, queue, workload


def _example(load: float, seed: int) -> dict[str, Any]:
    p = load_policy(example_path(POLICY)).policy
    scenario = scenario_for(p, 2.0)
    teams = tuple(
        dataclasses.replace(t, arrivals_per_hour=t.arrivals_per_hour * load) for t in scenario.teams
    )
    trace = generate(p, dataclasses.replace(scenario, teams=teams), seed)
    result = Simulator(p, trace.workloads, trace.utilisation).run()
    return summarize(result, trace.utilisation, (0, int(2 * DAY)))


def _free_hours(pool_summary: dict[str, Any], window_s: int) -> float:
    return float(pool_summary["gpus"] * (1 - pool_summary["allocation"]) * window_s / 3600)


def test_causes_add_up_to_each_pools_free_gpu_hours() -> None:
    s = _example(2.0, 42)
    for name, ps in s["pools"].items():
        total = sum(ps["idle_gpu_hours"].values())
        # allocation is rounded to 4 places, each cause to 2
        slack = ps["gpus"] * s["window_s"] / 3600 * 1e-4 + 0.01 * len(ps["idle_gpu_hours"])
        assert abs(total - _free_hours(ps, s["window_s"])) <= slack, (name, ps)
    production = s["pools"]["production"]["idle_gpu_hours"]
    waited = {c: h for c, h in production.items() if c != "nothing-waiting"}
    assert max(waited, key=lambda c: waited[c]) == "mig-layout", production
    assert s["idle_gpu_hours"]["mig-layout"] >= 100


def test_a_short_run_idles_for_its_gang_then_for_nothing() -> None:
    # one node of 8: a 6-GPU job runs an hour, an 8-GPU job waits for it (2 GPUs idle for the
    # gang larger than them: quota allows it), then runs; then nothing waits
    p = policy(
        pools=[pool("train", "H100-SXM5-80GB", 1, 8)],
        queues=[queue("r", {"h100-full": {"nominal": 8}})],
    )
    ws = [
        workload(p, "first", "r", gpus=6, duration=3600),
        workload(p, "second", "r", gpus=8, submit=60, duration=3600),
    ]
    result = Simulator(p, ws).run()
    s = summarize(result, {}, (0, 3 * 3600))
    idle = s["pools"]["train"]["idle_gpu_hours"]
    # 0-60 s: 2 free, nothing waits; 60-3600 s: 2 free, the 8-GPU job waits on quota
    # (6 of 8 used); 3600-7200: all busy; 7200-10800: 8 free, nothing waits
    assert idle["nominal-quota"] == round(2 * 3540 / 3600, 2)
    assert idle["nothing-waiting"] == round((2 * 60 + 8 * 3600) / 3600, 2)


def test_the_invariants_hold_on_every_cycle_with_reservations_sparing_and_moves_on() -> None:
    p = load_policy(example_path(POLICY)).policy
    on = dataclasses.replace(
        p.scheduling,
        reserve_after_s=900,
        reclaim_large_ratio=4,
        reclaim_large_after_s=7200,
        reclaim_grace_s=None,  # as when the test was written: grace leaves no move on seed 44
        consolidate_max_moves=4,
    )
    p = dataclasses.replace(p, scheduling=on)
    trace = generate(p, scenario_for(p, 1.0), 44)
    config = SimConfig(check_invariants=True)  # stops at the first broken rule
    result = Simulator(p, trace.workloads, trace.utilisation, config).run()
    assert len(result.completed) == len(trace.workloads)
    assert result.cycles > 100
    assert any(cause == "consolidate" for *_, cause in result.evictions)  # moves were checked
