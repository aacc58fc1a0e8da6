"""Seeded synthetic traces: per-team arrivals of typical job kinds, with a diurnal load.

A `Scenario` lists per team the job kinds it submits (a workload template, a weight, and
size, duration and utilisation ranges) and an arrival rate. Arrivals follow a Poisson process
whose rate swings with the time of day (busiest mid-afternoon). The same scenario and seed give
the same trace.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gpucarve.config.workload_spec import build_workload
from gpucarve.core.policy import Policy
from gpucarve.core.problems import InvalidInput
from gpucarve.core.vocabulary import MEMORY_ANNOTATION
from gpucarve.core.workload import Workload

DAY = 86_400


@dataclass(frozen=True)
class JobKind:
    name: str
    weight: float
    # A pod set template: `count`, `resources`, `annotations`, ...; `count` may be a list to
    # draw from.
    pod_set: dict[str, Any]
    duration_s: tuple[int, int]  # log-uniform between these
    utilisation: tuple[float, float] = (50.0, 90.0)
    priority_class: str | None = None
    topology: str = "none"
    namespace: str | None = None
    # (share, (lo, hi)): that share of its jobs stop using their GPUs after a fraction of
    # their run drawn between lo and hi, and hold them idle to the end (None: busy throughout)
    idle: tuple[float, tuple[float, float]] | None = None


@dataclass(frozen=True)
class Team:
    queue: str
    namespace: str
    arrivals_per_hour: float
    kinds: tuple[JobKind, ...]


@dataclass(frozen=True)
class Scenario:
    name: str
    teams: tuple[Team, ...]
    days: float = 2.0
    diurnal_amplitude: float = 0.5  # 0: flat; 0.5: rate swings between 0.5x and 1.5x


@dataclass
class Trace:
    workloads: list[Workload] = field(default_factory=list)
    utilisation: dict[str, float] = field(default_factory=dict)
    kind: dict[str, str] = field(default_factory=dict)
    # workload id -> seconds into its run after which it holds its GPUs idle (JobKind.idle)
    idle_after: dict[str, int] = field(default_factory=dict)


def rate_factor(t: float, amplitude: float) -> float:
    # peak at 15:00, trough at 03:00
    return 1.0 + amplitude * math.sin(2 * math.pi * (t / DAY - 0.375))


def generate(policy: Policy, scenario: Scenario, seed: int) -> Trace:
    rng = random.Random(seed)
    trace = Trace()
    horizon = scenario.days * DAY
    for team in scenario.teams:
        peak = team.arrivals_per_hour * (1 + scenario.diurnal_amplitude) / 3600
        t = 0.0
        n = 0
        weights = [k.weight for k in team.kinds]
        while True:
            # thinning: draw at the peak rate, keep with probability rate(t) / peak
            t += rng.expovariate(peak)
            if t >= horizon:
                break
            if rng.random() * (1 + scenario.diurnal_amplitude) > rate_factor(
                t, scenario.diurnal_amplitude
            ):
                continue
            kind = rng.choices(team.kinds, weights)[0]
            n += 1
            w, util = _make(policy, team, kind, n, int(t), rng)
            trace.workloads.append(w)
            trace.utilisation[w.id] = util
            trace.kind[w.id] = kind.name
            if kind.idle is not None:
                after = _idle_after(kind.idle, w, seed)
                if after is not None:
                    trace.idle_after[w.id] = after
    trace.workloads.sort(key=lambda w: (w.submit_time, w.id))
    return trace


def _idle_after(idle: tuple[float, tuple[float, float]], w: Workload, seed: int) -> int | None:
    # a stream of its own per workload: the arrivals, sizes and durations a seed gives stay
    # the same whether or not a kind models idleness
    rng = random.Random(f"idle/{seed}/{w.id}")
    share, (lo, hi) = idle
    if rng.random() >= share:
        return None
    assert w.duration is not None
    return max(1, int(w.duration * rng.uniform(lo, hi)))


def _make(
    policy: Policy, team: Team, kind: JobKind, n: int, t: int, rng: random.Random
) -> tuple[Workload, float]:
    pod_set = dict(kind.pod_set)
    count = pod_set.get("count", 1)
    if isinstance(count, list):
        pod_set["count"] = rng.choice(count)
    lo, hi = kind.duration_s
    duration = max(1, int(math.exp(rng.uniform(math.log(lo), math.log(hi)))))
    doc: dict[str, Any] = {
        "name": f"{kind.name}-{n}",
        "namespace": kind.namespace or team.namespace,
        "queue": team.queue,
        "submitTime": t,
        "duration": duration,
        "topology": kind.topology,
        "podSets": [pod_set],
    }
    if kind.priority_class:
        doc["priorityClass"] = kind.priority_class
    w, problems = build_workload(doc, policy)
    if w is None:
        raise InvalidInput(f"scenario {team.queue}/{kind.name}", problems)
    return w, round(rng.uniform(*kind.utilisation), 1)


def _gpu(n: int | list[int]) -> dict[str, Any]:
    return {"count": n, "resources": {"limits": {"nvidia.com/gpu": 8}}}


def three_teams(days: float = 2.0) -> Scenario:
    """The scenario of examples/three-teams.yaml: research trains, production serves on MIG,
    data science works in notebooks and small jobs."""
    research = Team(
        "research",
        "research",
        0.8,
        (
            JobKind("pretrain", 1, _gpu(2), (4 * 3600, 16 * 3600), (85, 98), "training", "rack"),
            JobKind("pretrain-xl", 0.5, _gpu([3, 4]), (4 * 3600, 12 * 3600), (85, 98), "training"),
            JobKind(
                "finetune",
                3,
                {"resources": {"limits": {"nvidia.com/gpu": 8}}},
                (1800, 6 * 3600),
                (80, 95),
                "training",
            ),
            JobKind(
                "experiment",
                4,
                {"resources": {"limits": {"nvidia.com/gpu": 2}}},
                (900, 3 * 3600),
                (60, 90),
                "training",
            ),
            JobKind(
                "dev",
                4,
                {"resources": {"limits": {"nvidia.com/gpu.shared": 1}}},
                (600, 2 * 3600),
                (15, 45),
                "dev-best-effort",
            ),
        ),
    )
    production = Team(
        "production",
        "production",
        2.5,
        (
            JobKind(
                "serve-large",
                2,
                {"count": [1, 2, 4], "resources": {"limits": {"nvidia.com/mig-3g.40gb": 1}}},
                (2 * 3600, 12 * 3600),
                (40, 70),
                "production-critical",
            ),
            JobKind(
                "serve-small",
                3,
                {"count": [1, 2], "resources": {"limits": {"nvidia.com/mig-1g.10gb": 1}}},
                (2 * 3600, 12 * 3600),
                (30, 60),
                "production-critical",
            ),
            JobKind(
                "batch",
                1,
                {"resources": {"limits": {"nvidia.com/gpu": 4}}},
                (1800, 4 * 3600),
                (70, 95),
                "training",
            ),
        ),
    )
    data_science = Team(
        "data-science",
        "data-science",
        8.0,
        (
            JobKind(
                "notebook",
                5,
                {"annotations": {MEMORY_ANNOTATION: "10240"}},
                (1800, 4 * 3600),
                (10, 40),
                "dev-best-effort",
                namespace="notebooks",
                # most notebooks are left open once their user is done: an assumption, not a
                # measurement (traces with their own idle column replace it)
                idle=(0.6, (0.2, 0.6)),
            ),
            JobKind(
                "small-train",
                2,
                {"resources": {"limits": {"nvidia.com/mig-1g.10gb": 1}}},
                (900, 2 * 3600),
                (50, 90),
                "training",
            ),
            JobKind(
                "train",
                1,
                {"resources": {"limits": {"nvidia.com/gpu": 4}}},
                (1800, 6 * 3600),
                (70, 95),
                "training",
            ),
        ),
    )
    return Scenario("three-teams", (research, production, data_science), days=days)


__all__: Sequence[str] = ("JobKind", "Scenario", "Team", "Trace", "generate", "three_teams")
