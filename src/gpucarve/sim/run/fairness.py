"""How fairly a run shared each cohort's pools: per queue, the share of a pool's cohort GPUs it
received against the share it was entitled to, hour by hour, Jain's index per hour, and how long
a queue below its share waited while another above its share ran.

Each pool of a cohort is judged on its own, since work for one GPU model cannot use another's:
its GPUs are the nominal quota the cohort's queues hold in its flavors (a flavor served by
several pools, or a GPU unit, spread over them by their GPUs). Entitlement is the weighted
max-min fair division of those GPUs among the queues' demand there at that moment (what they
hold plus what waits): each queue is owed its own nominal quota as far as its demand reaches,
and what the others leave is divided by weight among the queues that want more, none past its
demand (water-filling). Borrowing limits are not applied: the figure says what fair would have
been, not what the policy allows. A queue with no demand is entitled to nothing and counts
nowhere.

The run is sampled every `SAMPLE_S` seconds (held: the intervals covering the instant; waiting:
submitted, not finished and not running, in the first pool of its first flavor); each hour's
figure is the mean of its samples. A queue outside any cohort has nothing to share and is left
out. The queues, cohorts and quotas judged by are those of the policy given (`fairness`'s
`policy`), so a baseline that has none is judged by the policy it stands in for.

In a cohort tree (cohorts in cohorts) a root's whole tree is judged together, and entitlement is
divided level by level: the root's GPUs between its members (queues and child cohorts, each
owed its own nominal quota, a cohort its queues' and its own, as far as its demand reaches,
the rest by weight), then each cohort's part between its own members the same way. Each cohort
below the root is reported beside the queues, as `cohort:NAME`: what its queues received
against what it was owed. Jain's index is over the queues.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpucarve.core.amounts import FlavorName, as_flavor
from gpucarve.core.cohort_tree import CohortTree, cohort_tree
from gpucarve.core.policy import Cohort, Policy, Queue, flavor_pools
from gpucarve.core.requests import candidate_flavors, pod_set_gpus, slice_gpus
from gpucarve.core.workload import Workload
from gpucarve.sim.run.records import SimResult

SAMPLE_S = 300
HOUR = 3600
# shares closer than this are the same (a sample's rounding, a fraction of a GPU in a cohort)
EPSILON = 0.01


@dataclass(frozen=True)
class _Steps:
    """A queue's GPUs as a step function: change times, sorted, and the value from each on."""

    times: list[int]
    values: list[float]

    def at(self, t: int) -> float:
        i = bisect.bisect_right(self.times, t) - 1
        return self.values[i] if i >= 0 else 0.0


def _steps(changes: Sequence[tuple[int, float]]) -> _Steps:
    summed: dict[int, float] = defaultdict(float)
    for t, d in changes:
        summed[t] += d
    times, values, level = [], [], 0.0
    for t in sorted(summed):
        level += summed[t]
        times.append(t)
        values.append(level)
    return _Steps(times, values)


def asked_gpus(
    policy: Policy, w: Workload, pools: Mapping[FlavorName, str], owned: Mapping[str, float]
) -> dict[str, float]:
    """The GPUs a workload asks for, as allocation counts them, by pool: each pod set in the
    first of its flavors whose pool its queue holds quota in (`owned`: GPUs per pool), else
    its first flavor."""
    out: dict[str, float] = defaultdict(float)
    for ps in w.pod_sets:
        flavors = candidate_flavors(policy, ps.gpu)
        mine = [f for f in flavors if owned.get(pools[f.name].split("+")[0], 0.0) > 0]
        for f in mine[:1] or flavors[:1]:
            out[pools[f.name].split("+")[0]] += pod_set_gpus(policy, ps.gpu, ps.count, f)[1]
    return dict(out)


def nominal_by_pool(
    policy: Policy,
    q: Queue | Cohort,
    gpu: Mapping[FlavorName, float],
    pools: Mapping[FlavorName, str],
) -> dict[str, float]:
    """The queue's nominal quota in GPUs per pool: its flavors' where no unit of its covers
    them, and its GPU units'; what several pools serve spread over them by their GPUs."""
    out: dict[str, float] = defaultdict(float)
    pool_gpus = {p.name: p.gpus for p in policy.pools}

    def spread(names: set[str], gpus: float) -> None:
        total = sum(pool_gpus[n] for n in names) or 1
        for n in sorted(names):
            out[n] += gpus * pool_gpus[n] / total

    units = [policy.units[x.flavor] for x in q.quotas if x.flavor in policy.units]
    for x in q.quotas:
        unit = policy.units.get(x.flavor)
        if unit is not None:
            names = {n for f, _ in unit.charges if f in pools for n in pools[f].split("+")}
            spread(names, x.nominal / unit.parts_per_gpu)
        elif (f := as_flavor(x.flavor)) in gpu and not any(u.charge(f) for u in units):
            spread(set(pools[f].split("+")), x.nominal * gpu[f])
    return dict(out)


def entitled(
    capacity: float, nominal: Mapping[str, float], weight: Mapping[str, float],
    demand: Mapping[str, float],
) -> dict[str, float]:  # fmt: skip
    """Each queue's fair GPUs: its nominal as far as its demand reaches, then what is left
    divided by weight among those that want more, none past its demand."""
    got = {q: min(demand[q], nominal[q]) for q in demand}
    left = max(0.0, capacity - sum(got.values()))
    wanting = {q for q in demand if demand[q] - got[q] > 1e-9}
    while left > 1e-9 and wanting:
        total_w = sum(weight[q] for q in wanting)
        step = {q: left * weight[q] / total_w for q in wanting}
        full = {q for q in wanting if demand[q] - got[q] <= step[q]}
        if not full:
            for q in wanting:
                got[q] += step[q]
            break
        for q in full:  # these reach their demand; the rest of their step goes round again
            left -= demand[q] - got[q]
            got[q] = demand[q]
        wanting -= full
    return got


Key = tuple[str, str]  # (queue, pool key)


def _by_queue(
    result: SimResult, gpu: Mapping[FlavorName, float],
    slices: Mapping[str, tuple[str, FlavorName]], policy: Policy,
    nominal: Mapping[str, Mapping[str, float]],
) -> tuple[dict[Key, _Steps], dict[Key, _Steps]]:  # fmt: skip
    """Per queue and pool key, GPUs held and GPUs waiting, as step functions of time."""
    held: dict[Key, list[tuple[int, float]]] = defaultdict(list)
    waiting: dict[Key, list[tuple[int, float]]] = defaultdict(list)
    runs: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for iv in result.intervals:
        by_key: dict[str, float] = defaultdict(float)
        for p in iv.pods:
            for s in p.slice_ids:
                pool, flavor = slices[s]
                by_key[pool] += gpu[flavor]
        for k, g in by_key.items():
            held[(iv.queue, k)] += [(iv.start, g), (iv.end, -g)]
        runs[iv.workload].append((iv.start, iv.end))
    pools = flavor_pools(policy)
    for w in result.submitted.values():
        end = result.completed.get(w.id, result.end)
        gaps: list[tuple[int, int]] = []
        t = w.submit_time
        for start, stop in sorted(runs.get(w.id, [])):
            if start > t:
                gaps.append((t, start))
            t = max(t, stop)
        if end > t:  # never started, or evicted and not started again
            gaps.append((t, end))
        if not gaps:
            continue
        for k, asked in asked_gpus(policy, w, pools, nominal.get(w.queue, {})).items():
            for a, b in gaps:
                waiting[(w.queue, k)] += [(a, asked), (b, -asked)]
    return (
        {q: _steps(c) for q, c in held.items()},
        {q: _steps(c) for q, c in waiting.items()},
    )


def _jain(xs: Sequence[float]) -> float:
    squares = sum(x * x for x in xs)
    return sum(xs) ** 2 / (len(xs) * squares) if squares else 1.0


@dataclass
class _Hour:
    received: dict[str, float]
    entitled: dict[str, float]
    samples: int = 0
    # cohorts below a tree's root (`cohort:NAME`): what their queues received, were owed
    levels_received: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    levels_entitled: dict[str, float] = field(default_factory=lambda: defaultdict(float))


def fairness(
    result: SimResult,
    window: tuple[int, int],
    gpu: Mapping[FlavorName, float],
    slices: Mapping[str, tuple[str, FlavorName]],
    policy: Policy,
) -> dict[str, dict[str, object]]:
    """Per cohort of `policy` and pool: per queue received and entitled shares (means over the
    window, worst hour), the hours it waited below its share while another ran above, and
    Jain's index per hour."""
    pools = flavor_pools(policy)
    worth = slice_gpus(policy)  # a baseline's run has other flavors than the policy judged by
    tree = cohort_tree(policy) if policy.nested else None
    cohorts: dict[str, list[Queue]] = defaultdict(list)
    for q in policy.queues:
        if q.cohort is not None:
            cohorts[q.cohort if tree is None else tree.root(q.cohort)].append(q)
    nominal = {q.name: nominal_by_pool(policy, q, worth, pools) for q in policy.queues}
    own = {c.name: nominal_by_pool(policy, c, worth, pools) for c in policy.cohorts}
    held, waiting = _by_queue(result, gpu, slices, policy, nominal)
    out: dict[str, dict[str, object]] = {}
    for cohort, queues in sorted(cohorts.items()):
        keys = sorted({k for n in nominal.values() for k, v in n.items() if v > 0})
        levels = None
        if tree is not None:
            levels = _Levels(tree, cohort, queues)
        out[cohort] = {
            k: _pool(
                queues,
                held,
                waiting,
                window,
                k,
                {q.name: nominal[q.name].get(k, 0.0) for q in queues},
                None if levels is None else levels.at(k, own),
            )
            for k in keys
        }
    return out


@dataclass
class _Levels:
    """A root cohort's tree for the fairness figures: node names (a queue's, or `cohort:X`),
    each node's members, and each cohort's own nominal GPUs per pool key."""

    tree: CohortTree
    root: str
    queues: Sequence[Queue]

    def at(self, key: str, own: Mapping[str, Mapping[str, float]]) -> _TreeAt:
        members: dict[str, list[str]] = defaultdict(list)
        weight: dict[str, float] = {}
        mine: dict[str, float] = {}
        for q in self.queues:
            assert q.cohort is not None
            members[f"cohort:{q.cohort}"].append(q.name)
        for c in self._cohorts():
            parent = self.tree.parent.get(c)
            if parent is not None:
                members[f"cohort:{parent}"].append(f"cohort:{c}")
            weight[f"cohort:{c}"] = self.tree.weight_milli.get(c, 1000) / 1000
            mine[f"cohort:{c}"] = own.get(c, {}).get(key, 0.0)
        return _TreeAt(f"cohort:{self.root}", dict(members), weight, mine)

    def _cohorts(self) -> list[str]:
        return sorted(c for c in self.tree.parent if self.tree.root(c) == self.root)


@dataclass
class _TreeAt:
    """One root's tree in one pool key: its top node, members per cohort node, cohorts'
    weights and own nominal GPUs."""

    top: str
    members: Mapping[str, Sequence[str]]
    weight: Mapping[str, float]
    own: Mapping[str, float]

    def totals(self, per_queue: Mapping[str, float]) -> dict[str, float]:
        """Per node, the sum over its queues of `per_queue` (a queue's own figure)."""
        out: dict[str, float] = dict(per_queue)

        def total(node: str) -> float:
            if node not in out:
                out[node] = sum(total(m) for m in self.members.get(node, ()))
            return out[node]

        total(self.top)
        return out

    def entitled(
        self, nominal: Mapping[str, float], weight: Mapping[str, float],
        want: Mapping[str, float],
    ) -> dict[str, float]:  # fmt: skip
        """Entitlement level by level from the top (`nominal`, `weight`, `want` per queue)."""
        owed = self.totals(nominal)
        for c, n in self.own.items():
            owed[c] = owed.get(c, 0.0) + n
        # a cohort's own nominal adds to every cohort above it
        for c, n in self.own.items():
            up = self._parent(c)
            while up is not None:
                owed[up] += n
                up = self._parent(up)
        asks = self.totals({q: want.get(q, 0.0) for q in nominal})
        weights = {**weight, **self.weight}
        out: dict[str, float] = {}

        def share(node: str, amount: float) -> None:
            kids = [m for m in self.members.get(node, ()) if asks.get(m, 0.0) > 0]
            got = entitled(
                amount, {m: owed.get(m, 0.0) for m in kids}, {m: weights[m] for m in kids},
                {m: asks[m] for m in kids},
            )  # fmt: skip
            for m, g in got.items():
                out[m] = g
                if m in self.members:
                    share(m, g)

        share(self.top, owed.get(self.top, 0.0))
        return out

    def _parent(self, node: str) -> str | None:
        return next((c for c, ms in self.members.items() if node in ms), None)


def _pool(
    queues: Sequence[Queue],
    held: Mapping[Key, _Steps],
    waiting: Mapping[Key, _Steps],
    window: tuple[int, int],
    key: str,
    nominal: Mapping[str, float],
    levels: _TreeAt | None = None,
) -> dict[str, object]:
    names = [q.name for q in queues]
    weight = {q.name: q.weight_milli / 1000 for q in queues}
    capacity = sum(nominal.values())
    cohorts: list[str] = []
    if levels is not None:
        capacity += sum(levels.own.values())
        cohorts = sorted(c for c in levels.members if c != levels.top)
    none = _Steps([], [])
    hours: dict[int, _Hour] = {}
    below_s: dict[str, int] = dict.fromkeys(names, 0)
    for t in range(window[0], window[1], SAMPLE_S):
        have = {q: held.get((q, key), none).at(t) for q in names}
        wait = {q: waiting.get((q, key), none).at(t) for q in names}
        want = {q: have[q] + wait[q] for q in names if have[q] + wait[q] > 0}
        if levels is None:
            fair = entitled(capacity, nominal, weight, want)
        else:
            tree_fair = levels.entitled(nominal, weight, want)
            fair = {q: tree_fair[q] for q in want}
        hour = hours.get((t - window[0]) // HOUR)
        if hour is None:
            hour = hours[(t - window[0]) // HOUR] = _Hour(defaultdict(float), defaultdict(float))
        hour.samples += 1
        above = {q for q in fair if (have[q] - fair[q]) / capacity > EPSILON}
        for q in fair:
            hour.received[q] += have[q] / capacity
            hour.entitled[q] += fair[q] / capacity
            short = (fair[q] - have[q]) / capacity > EPSILON
            if short and wait[q] > 0 and above - {q}:
                below_s[q] += SAMPLE_S
        if levels is not None:
            got = levels.totals(have)
            for c in cohorts:
                if c in tree_fair:
                    hour.levels_received[c] += got[c] / capacity
                    hour.levels_entitled[c] += tree_fair[c] / capacity
    return _figures(names, hours, below_s, capacity, cohorts)


def _shares(hours: Sequence[tuple[float, float, int]], samples: int) -> dict[str, float]:
    """Received against entitled, from each hour's (received, entitled, samples) sums."""
    got = sum(r for r, _, _ in hours) / samples
    fair = sum(e for _, e, _ in hours) / samples
    deviations = [(r - e) / n for r, e, n in hours if n]
    return {
        "share_received": round(got, 4),
        "share_entitled": round(fair, 4),
        # over the whole window: what it received against what it was owed, all told
        "deviation_over_window": round(abs(got - fair), 4),
        # hour by hour: the mean and the worst hour
        "deviation_mean": round(sum(abs(d) for d in deviations) / max(1, len(deviations)), 4),
        "deviation_worst_hour": round(max((abs(d) for d in deviations), default=0.0), 4),
    }


def _figures(
    names: Sequence[str],
    hours: Mapping[int, _Hour],
    below_s: Mapping[str, int],
    capacity: float,
    cohorts: Sequence[str] = (),
) -> dict[str, object]:
    per_queue: dict[str, dict[str, float]] = {}
    jain: list[float] = []
    for _, h in sorted(hours.items()):
        xs = [h.received[q] / h.entitled[q] for q in h.entitled if h.entitled[q] > 0]
        if xs:
            jain.append(round(_jain(xs), 4))
    samples = sum(h.samples for h in hours.values()) or 1
    for q in names:
        per_queue[q] = _shares(
            [(h.received.get(q, 0.0), h.entitled.get(q, 0.0), h.samples) for h in hours.values()],
            samples,
        )
        per_queue[q]["hours_below_share_while_another_above"] = round(below_s[q] / HOUR, 2)
    for c in cohorts:
        per_queue[c] = _shares(
            [
                (h.levels_received.get(c, 0.0), h.levels_entitled.get(c, 0.0), h.samples)
                for h in hours.values()
            ],
            samples,
        )
    return {
        "gpus": round(capacity, 3),
        "queues": per_queue,
        "deviation_worst_hour": max(
            (per_queue[q]["deviation_worst_hour"] for q in names), default=0.0
        ),
        "deviation_over_window": max(
            (per_queue[q]["deviation_over_window"] for q in names), default=0.0
        ),
        "jain_mean": round(sum(jain) / len(jain), 4) if jain else 1.0,
        "jain_worst_hour": min(jain, default=1.0),
        "jain_by_hour": jain,
    }
