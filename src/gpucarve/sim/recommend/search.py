"""`simulate --recommend` as a search: every policy option that changes decisions, tried from
the policy as read, ranked by the platform team's stated objective (`objective:`), derived on
some traces and judged on others.

The search is greedy and deterministic. Each round takes the policy reached so far, makes one
candidate per change (`changes`: each scheduling option to each of its other values, the
borrowing and lending limits a pool idled for lifted, a MIG pool's layout matched to demand, its
dynamic MIG and one GPU quota per queue), replays every candidate on the derive traces and keeps
the best if it ranks better than where the round started by at least `MIN_GAIN` of the
objective (a smaller gain is noise the next trace would not repeat). It stops after
`MAX_ROUNDS` rounds or when no change gains. The rounds' path — the policy as read, then one
change more at each step — is then replayed on the judge traces, which no step was chosen on,
and the step that ranks best there is the recommendation: the policy as read when no step
holds.

Ranking (`rank`): a candidate that keeps every queue's wait p95 within its bound ranks before
one that does not; among those that do not, the smaller total excess (hours past the bounds)
first; then the objective figure (mean over the traces), then the candidate's name. A queue the
objective names is bounded by its `waitP95Seconds`; one it does not name by its p95 under the
policy as read on the same trace plus `unnamedWaitGrowth` of it (and a minute, so a queue that
never waited is not held to zero).

Evaluations go through an `Evaluator` (`executors`): in this process, on the machine's cores, or
on a Ray cluster; the figures and the choice do not depend on which.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpucarve.core.policy import Minimize, Objective, Policy, SchedulingConfig
from gpucarve.core.workload import Workload
from gpucarve.sim.recommend.proposals import limits, mig_layout, quota_moves

HOUR = 3600.0
MAX_ROUNDS = 4
# a round's best change is kept only if it gains at least this share of the objective figure
# (and `MIN_GAIN_HOURS`): smaller differences come and go between seeds
MIN_GAIN = 0.02
MIN_GAIN_HOURS = 0.5
# the slack a bound always allows (a queue whose work never waited is not held to 0 s)
SLACK_S = 60.0

# Scheduling options that change decisions, the values tried, and the SchedulingConfig field
# each one reads (what the policy as read holds).
GRID: tuple[tuple[str, str, tuple[object, ...]], ...] = (
    ("reclaimLargeVictimRatio", "reclaim_large_ratio", (None, 2, 4, 8)),
    ("reclaimLargeVictimAfterSeconds", "reclaim_large_after_s", (21_600, 43_200, 86_400)),
    ("reclaimGraceSeconds", "reclaim_grace_s", (None, 1_800, 7_200)),
    ("consolidateMaxMoves", "consolidate_max_moves", (None, 2, 4)),
    ("reserveAfterSeconds", "reserve_after_s", (None, 900, 3_600)),
    ("loansWaitForLenders", "loans_wait_for_lenders", (False, True)),
    ("queueing", "queueing", ("best-effort-fifo", "strict-fifo")),
    ("usageHalfLifeSeconds", "usage_half_life_s", (None, 3_600, 21_600)),
)


@dataclass(frozen=True)
class Case:
    """One trace candidates are replayed on: its workloads, their SM utilisation, and the
    window the figures are taken over."""

    key: str
    workloads: tuple[Workload, ...]
    utilisation: Mapping[str, float]
    window: tuple[int, int]

    @property
    def days(self) -> float:
        return (self.window[1] - self.window[0]) / 86_400


@dataclass(frozen=True)
class Figures:
    """What the ranking reads from one replay."""

    lost: float  # GPU-hours of work preemption threw away
    idle: float  # GPU-hours free while work waited
    wait_p95_s: Mapping[str, float]  # queue -> wait p95
    last_start_p95_s: Mapping[str, float]  # queue -> wait until the last start, p95
    gpu_hours: Mapping[str, float]  # queue -> GPU-hours held
    held: Mapping[str, float]  # pool -> GPUs held on average
    idle_by_pool: Mapping[str, Mapping[str, float]]  # pool -> cause -> GPU-hours

    def objective(self, minimize: Minimize) -> float:
        if minimize is Minimize.LOST:
            return self.lost
        if minimize is Minimize.IDLE:
            return self.idle
        return self.lost + self.idle

    @staticmethod
    def of(summary: Mapping[str, Any]) -> Figures:
        teams, pools = summary["teams"], summary["pools"]
        return Figures(
            lost=float(summary["gpu_hours_lost_to_preemption"]),
            idle=round(
                sum(h for c, h in summary["idle_gpu_hours"].items() if c != "nothing-waiting"), 3
            ),
            wait_p95_s={t: float(v["wait_p95_s"]) for t, v in teams.items()},
            last_start_p95_s={t: float(v["wait_until_last_start_p95_s"]) for t, v in teams.items()},
            gpu_hours={t: float(v.get("gpu_hours", 0.0)) for t, v in teams.items()},
            held={p: round(v["allocation"] * v["gpus"], 3) for p, v in pools.items()},
            idle_by_pool={p: dict(v.get("idle_gpu_hours", {})) for p, v in pools.items()},
        )


class Evaluator(Protocol):
    """Replays policies (as YAML text) on the cases it was given, in the order asked."""

    def evaluate(self, jobs: Sequence[tuple[str, str]]) -> list[Figures]:
        """`jobs`: (policy YAML, case key) pairs; the figures in the same order."""
        ...


@dataclass(frozen=True)
class Change:
    """One change from the policy as read: what it sets (`key`: a later change of the same
    key replaces it), how it reads, and why it was tried."""

    key: str
    label: str
    why: str


@dataclass(frozen=True)
class Candidate:
    """A whole policy document and the changes from the policy as read that made it."""

    changes: tuple[Change, ...]
    doc: Mapping[str, Any]

    @property
    def name(self) -> str:
        return " + ".join(c.label for c in self.changes) or "the policy as read"

    def then(self, other: Candidate) -> Candidate:
        """`other` (one change made to this candidate's document) with this one's changes."""
        (change,) = other.changes
        kept = tuple(c for c in self.changes if c.key != change.key)
        return Candidate((*kept, change), other.doc)


@dataclass(frozen=True)
class Verdict:
    """A candidate on a set of cases: the objective figure (mean) and the hours past the wait
    bounds (mean of each case's sum over queues), with the queues past theirs."""

    objective: float
    excess_h: float
    past: tuple[str, ...]

    @property
    def within(self) -> bool:
        return self.excess_h == 0.0

    def key(self) -> tuple[bool, float, float]:
        return (not self.within, round(self.excess_h, 6), round(self.objective, 6))


def bounds(objective: Objective, base: Figures) -> dict[str, float]:
    """Each queue's wait p95 bound (seconds) on a case where the policy as read gave `base`."""
    return {
        q: float(objective.wait_p95_s[q])
        if q in objective.wait_p95_s
        else base.wait_p95_s[q] * (1 + objective.unnamed_growth) + SLACK_S
        for q in base.wait_p95_s
    }


def verdict(objective: Objective, runs: Sequence[Figures], base: Sequence[Figures]) -> Verdict:
    excess = 0.0
    past: set[str] = set()
    for run, ref in zip(runs, base, strict=True):
        for q, bound in bounds(objective, ref).items():
            over = run.wait_p95_s.get(q, 0.0) - bound
            if over > 0:
                excess += over / HOUR
                past.add(q)
    n = max(1, len(runs))
    value = sum(r.objective(objective.minimize) for r in runs) / n
    return Verdict(round(value, 3), round(excess / n, 3), tuple(sorted(past)))


def changes(
    doc: Mapping[str, Any], policy: Policy, derive: Case, base: Figures, past: Sequence[str] = ()
) -> list[Candidate]:
    """One candidate per change from `doc` (whose replay on `derive` gave `base`, and left the
    queues `past` their wait bounds); each keeps the changes already made (the caller adds
    them)."""
    out = [_set(doc, key, value) for key, attr, values in GRID
           for value in values if value != _current(policy.scheduling, attr)]  # fmt: skip
    idle = base.idle_by_pool
    proposals = [
        *limits(doc, policy, idle),
        *mig_layout(doc, policy, derive.workloads, idle),
        *quota_moves(doc, policy, past),
    ]
    for prop in proposals:
        out.append(Candidate((Change(prop.name, prop.name, prop.why),), prop.doc))
    return out


def _current(s: SchedulingConfig, attr: str) -> object:
    value = getattr(s, attr)
    return getattr(value, "value", value)  # an enum (queueing) as the policy spells it


def _set(doc: Mapping[str, Any], key: str, value: object) -> Candidate:
    new = copy.deepcopy(dict(doc))
    new.setdefault("scheduling", {})[key] = value
    shown = "null" if value is None else str(value).lower() if isinstance(value, bool) else value
    return Candidate((Change(key, f"{key}: {shown}", f"scheduling.{key} set to {shown}"),), new)


@dataclass
class Step:
    """One step of the search's path: the candidate (as YAML and as the policy it builds,
    validated once), its verdict on the derive cases, and the round's candidates ranked
    (name, verdict)."""

    candidate: Candidate
    text: str
    policy: Policy
    derived: Verdict
    figures: list[Figures]
    ranked: list[tuple[str, Verdict]] = field(default_factory=list)


Load = Callable[[Mapping[str, Any]], tuple[str, Policy] | str]


def search(
    doc: Mapping[str, Any],
    load: Load,
    objective: Objective,
    derive: Sequence[Case],
    evaluator: Evaluator,
    progress: Callable[[str], None],
) -> list[Step]:
    """The path from `doc`: the policy as read, then the best change of each round that gains.
    `load` turns a document into (YAML, policy), or a reason it does not validate."""
    loaded = load(doc)
    if isinstance(loaded, str):
        raise ValueError(f"the policy as read does not validate: {loaded}")
    text, policy = loaded
    base = evaluator.evaluate([(text, c.key) for c in derive])
    here = Step(Candidate((), doc), text, policy, verdict(objective, base, base), base)
    path = [here]
    for round_no in range(1, MAX_ROUNDS + 1):
        best = _round(here, load, objective, derive, base, evaluator, progress, round_no)
        if best is None:
            break
        here = best
        path.append(here)
    return path


def _round(
    here: Step,
    load: Load,
    objective: Objective,
    derive: Sequence[Case],
    base: Sequence[Figures],
    evaluator: Evaluator,
    progress: Callable[[str], None],
    round_no: int,
) -> Step | None:
    """Every change from `here`, replayed and ranked (kept on `here.ranked`); the best as the
    next step when it gains, else None."""
    steps: list[Step] = []
    # the idle accounting's changes follow the first derive trace (their demand, layouts and
    # limits are fitted to one trace); every candidate is judged on all of them
    for change in changes(
        here.candidate.doc, here.policy, derive[0], here.figures[0], here.derived.past
    ):
        made = load(change.doc)
        if isinstance(made, str):
            progress(f"recommend: {change.name}: the change does not validate ({made})")
            continue
        steps.append(Step(here.candidate.then(change), *made, here.derived, []))
    progress(
        f"recommend: round {round_no}: {len(steps)} candidates × {len(derive)} derive "
        f"trace(s) from {here.candidate.name}"
    )
    runs = evaluator.evaluate([(st.text, c.key) for st in steps for c in derive])
    n = len(derive)
    for i, st in enumerate(steps):
        st.figures = runs[i * n : (i + 1) * n]
        st.derived = verdict(objective, st.figures, base)
    steps.sort(key=lambda st: (st.derived.key(), st.candidate.changes[-1].label))
    here.ranked = [(st.candidate.changes[-1].label, st.derived) for st in steps]
    if not steps or not _gains(steps[0].derived, here.derived):
        return None
    return steps[0]


def _gains(new: Verdict, old: Verdict) -> bool:
    if new.key()[:2] < old.key()[:2]:
        return True  # closer to the bounds
    if new.key()[:2] > old.key()[:2]:
        return False
    gain = old.objective - new.objective
    return gain >= max(MIN_GAIN_HOURS, MIN_GAIN * old.objective)


@dataclass(frozen=True)
class Judged:
    """A step of the path on the judge cases, against the policy as read there."""

    step: Step
    verdict: Verdict
    figures: list[Figures]
    holds_on: int  # judge cases where it ranks at least as well as the policy as read


def judge(
    path: Sequence[Step], objective: Objective, cases: Sequence[Case], evaluator: Evaluator
) -> list[Judged]:
    """Every step of the path replayed on `cases`, ranked as the search ranked, best first."""
    runs = evaluator.evaluate([(step.text, c.key) for step in path for c in cases])
    n = len(cases)
    base = runs[:n]
    out = []
    for k, step in enumerate(path):
        figs = runs[k * n : (k + 1) * n]
        holds = sum(
            verdict(objective, [f], [b]).key() <= verdict(objective, [b], [b]).key()
            for f, b in zip(figs, base, strict=True)
        )
        out.append(Judged(step, verdict(objective, figs, base), figs, holds))
    # ties go to the shorter path: a change that buys nothing is not recommended
    order = sorted(range(len(out)), key=lambda k: (out[k].verdict.key(), k))
    return [out[k] for k in order]
