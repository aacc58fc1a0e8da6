"""`simulate`'s account of the policy's idleness rules: the same gpucarve run without them,
and per team the GPU-hours held but idle with and without, what the rules reclaimed, and what
that cost (the reclaimed sessions, waits, preemptions)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpucarve.core.policy import Policy
from gpucarve.core.workload import Workload
from gpucarve.sim.run import report
from gpucarve.sim.run.baselines import without_idleness
from gpucarve.sim.run.metrics import summarize
from gpucarve.sim.run.records import SimConfig
from gpucarve.sim.run.runner import Simulator


def has_rules(policy: Policy, config: SimConfig) -> bool:
    """Whether there is anything to compare: rules in the policy and idleness in the trace."""
    return bool(config.idle_after) and any(q.idleness for q in policy.queues)


def effect(
    policy: Policy,
    workloads: list[Workload],
    utilisation: Mapping[str, float],
    config: SimConfig,
    window: tuple[int, int],
    dev: set[str],
    with_rules: Mapping[str, Any],
) -> dict[str, Any]:
    """`with_rules`: gpucarve's summary under the policy as written."""
    result = Simulator(without_idleness(policy), workloads, utilisation, config).run()
    without = summarize(result, utilisation, window, dev, policy)
    teams = sorted(with_rules["teams"])
    return {
        "rules": {q.name: q.idleness.describe() for q in policy.queues if q.idleness},
        "held_idle_gpu_hours": {
            t: {
                "without_rules": without["teams"][t].get("gpu_hours_held_idle", 0.0),
                "with_rules": with_rules["teams"][t].get("gpu_hours_held_idle", 0.0),
            }
            for t in teams
        },
        "reclaimed_workloads": with_rules.get("idle_reclaims", 0),
        "gpu_hours_returned": with_rules.get("gpu_hours_idle_reclaimed", 0.0),
        "cost": {
            "wait_p95_s": {
                t: {
                    "without_rules": without["teams"][t]["wait_p95_s"],
                    "with_rules": with_rules["teams"][t]["wait_p95_s"],
                }
                for t in teams
            },
            **{
                k: {"without_rules": without[k], "with_rules": with_rules[k]}
                for k in ("preemptions", "gpu_hours_lost_to_preemption")
            },
        },
    }


def table(block: Mapping[str, Any]) -> report.Table:
    rows = []
    for team, held in block["held_idle_gpu_hours"].items():
        wait = block["cost"]["wait_p95_s"][team]
        rows.append(
            [
                team,
                f"{held['without_rules']:,.1f} -> {held['with_rules']:,.1f}",
                f"{wait['without_rules'] / 3600:.1f} h -> {wait['with_rules'] / 3600:.1f} h",
            ]
        )
    pre = block["cost"]["preemptions"]
    title = (
        f"Idleness rules (gpucarve without -> with): {block['reclaimed_workloads']} idle "
        f"workloads reclaimed, {block['gpu_hours_returned']:,.1f} GPU-hours of idle holding "
        f"returned; preemptions {pre['without_rules']} -> {pre['with_rules']}"
    )
    return title, ["team", "GPU-hours held idle", "wait p95"], rows
