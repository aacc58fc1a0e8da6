"""A synthetic scenario for any policy: each queue submits work for the flavors it has quota
for, at a rate that offers about 70 % of its nominal quota on average.

`gpucarve simulate --policy P` without `--trace` uses the three-team scenario only on a policy
with the example's three queues; any other policy (one a user wrote, one `gpucarve import`
wrote) gets this one, so a what-if never needs a trace to start.
"""

from __future__ import annotations

import math
from typing import Any

from gpucarve.core.amounts import as_flavor
from gpucarve.core.policy import Flavor, Policy, Queue, Quota, SliceKind
from gpucarve.core.vocabulary import DRA_GPU_DRIVER
from gpucarve.sim.traces.synthetic import JobKind, Scenario, Team, three_teams

THREE_TEAMS = frozenset({"research", "production", "data-science"})
OFFERED_LOAD = 0.7  # of each queue's nominal quota, on average over the day
DURATION_S = (1800, 4 * 3600)  # log-uniform
_MEAN_DURATION_S = (DURATION_S[1] - DURATION_S[0]) / math.log(DURATION_S[1] / DURATION_S[0])


def _largest_node(policy: Policy, flavor: str) -> int:
    """Most slices of `flavor` one node holds (a pod must fit on one node)."""
    best = 0
    for pool in policy.pools:
        for f, n in pool.flavor_slices_per_node():
            if f.name == flavor:
                best = max(best, n)
    return best


def _priority(policy: Policy, q: Queue) -> str | None:
    allowed = q.allowed_priority_classes
    if not allowed:
        return None  # the policy's default class, if it has one
    default = next((c.name for c in policy.priority_classes if c.default), None)
    return default if default in allowed else allowed[0]


def _asking(f: Flavor, n: int) -> dict[str, Any]:
    """A pod set's request for `n` slices of `f`: its resource, or for a DRA flavor a claim
    of its device class (a MIG one selecting the flavor's profile, a share of a GPU asking
    the memory of `n` replicas)."""
    if not f.dra:
        return {"resources": {"limits": {f.resource_name: n}}}
    selectors = []
    if f.profile is not None:
        selectors = [f'device.attributes["{DRA_GPU_DRIVER}"].profile == "{f.profile}"']
    claim: dict[str, Any] = {"deviceClassName": f.resource_name, "count": n, "selectors": selectors}
    if f.kind in (SliceKind.TIME_SLICE, SliceKind.MPS):
        claim["capacity"] = {"memory": f"{f.memory_mib * n}Mi"}  # a share of one GPU
        claim["count"] = 1
    return {"deviceClaims": [claim]}


def _owned(policy: Policy, q: Queue) -> list[tuple[Flavor, int]]:
    """Each flavor the queue has nominal quota for, with how many of its slices: a flavor's
    own quota, or a GPU unit's spent all on that flavor (a unit covers every flavor of its
    model)."""
    out: list[tuple[Flavor, int]] = []
    for quota in q.quotas:
        unit = policy.units.get(quota.flavor)
        if unit is None:
            out.append((policy.flavors[as_flavor(quota.flavor)], quota.nominal))
            continue
        out += [(policy.flavors[f], quota.nominal // cost) for f, cost in unit.charges]
    return [(f, n) for f, n in out if n > 0]


def _nominal_slices(policy: Policy, quota: Quota) -> float:
    """A quota in slices: a GPU unit's (in parts of a GPU) as the mean over its flavors of
    the slices it would buy of each."""
    unit = policy.units.get(quota.flavor)
    if unit is None:
        return quota.nominal
    return sum(quota.nominal // cost for _, cost in unit.charges) / len(unit.charges)


def _kinds(policy: Policy, q: Queue) -> list[tuple[JobKind, float]]:
    """Job kinds for each flavor the queue owns, with the slices one job takes on average."""
    limits = dict(q.max_per_workload)
    prio = _priority(policy, q)
    out: list[tuple[JobKind, float]] = []
    for f, nominal in _owned(policy, q):
        cap = min(limits.get(f.name, nominal), _largest_node(policy, f.name))
        if cap <= 0:
            continue
        pod_set: dict[str, Any]
        if f.kind is SliceKind.WHOLE:
            sizes = [n for n in (1, 2, 4, 8) if n <= cap]
            for n in sizes:
                pod_set = _asking(f, n)
                kind = JobKind(f"train-{f.name}-{n}", 1.0, pod_set, DURATION_S, (60, 95), prio)
                out.append((kind, float(n)))
        elif f.kind is SliceKind.MIG:
            counts = [c for c in (1, 2) if c <= min(cap, nominal)] or [1]
            pod_set = {"count": counts, **_asking(f, 1)}
            kind = JobKind(f"serve-{f.name}", 1.0, pod_set, DURATION_S, (30, 70), prio)
            out.append((kind, sum(counts) / len(counts)))
        else:
            pod_set = _asking(f, 1)
            kind = JobKind(f"dev-{f.name}", 1.0, pod_set, DURATION_S, (10, 45), prio)
            out.append((kind, 1.0))
    return out


def from_policy(policy: Policy, days: float) -> Scenario:
    teams = []
    for q in policy.queues:
        kinds = _kinds(policy, q)
        if not kinds:
            continue
        nominal = sum(_nominal_slices(policy, quota) for quota in q.quotas)
        mean_slices = sum(s for _, s in kinds) / len(kinds)
        per_hour = OFFERED_LOAD * nominal * 3600 / (mean_slices * _MEAN_DURATION_S)
        teams.append(Team(q.name, q.namespaces[0], per_hour, tuple(k for k, _ in kinds)))
    return Scenario(f"{policy.name}-queues", tuple(teams), days=days)


def scenario_for(policy: Policy, days: float) -> Scenario:
    """The three-team scenario on the example's queues, else one derived from the policy."""
    if {q.name for q in policy.queues} >= THREE_TEAMS:
        return three_teams(days)
    return from_policy(policy, days)


def is_three_teams(scenario: Scenario) -> bool:
    return scenario.name == "three-teams"


__all__ = ("from_policy", "is_three_teams", "scenario_for")
