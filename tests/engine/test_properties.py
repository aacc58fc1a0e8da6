"""Properties over random clusters and workload streams.

For every cycle: the reused Engine gives exactly what a fresh cycle gives (determinism), no
slice is held twice, quota never goes beyond the borrowing rules, gangs are all-or-nothing,
only preemptible work that is lower-priority (same queue) or borrowed (reclaim) is evicted, and
a closed system settles without queues evicting each other back and forth.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gpucarve.config.catalog_file import packaged_catalog
from gpucarve.core import mig
from gpucarve.core.policy import Policy
from gpucarve.core.snapshot import Snapshot
from gpucarve.core.workload import Workload
from gpucarve.engine import Engine, run_cycle
from gpucarve.engine.apply import apply, finish
from gpucarve.engine.invariants import step_violations
from tests.engine.builders import policy, pool, snapshot, workload
from tests.fuzz.budget import fuzz_settings

CLASSES = [
    {"name": "p0", "value": 0, "preemptible": True, "default": True},
    {"name": "p1", "value": 10, "preemptible": True},
    {"name": "p2", "value": 20, "preemptible": False},
]
A100 = packaged_catalog().get("A100-80GB").mig
assert A100 is not None
LAYOUTS = mig.maximal_layouts(A100)


@st.composite
def clusters(
    draw: st.DrawFn, cohort: bool | None = None, big: bool = False, tree: bool = False
) -> Policy:
    """A random policy; `big`: tens of nodes per pool instead of one to three; `tree`: the
    queues in a random tree of cohorts (up to three levels, cohorts with quotas and limits
    of their own)."""
    pools: list[dict[str, Any]] = []
    if draw(st.booleans()):
        nodes = draw(st.integers(8, 40) if big else st.integers(1, 3))
        pools.append(
            pool(
                "h",
                "H100-SXM5-80GB",
                nodes,
                draw(st.sampled_from([2, 4, 8])),
                topology={"nodesPerRack": min(4 if big else 2, nodes), "nodesPerNvlinkDomain": 1},
            )
        )
    if draw(st.booleans()):
        layout = dict(draw(st.sampled_from(LAYOUTS)))
        pools.append(
            pool(
                "m",
                "A100-80GB",
                draw(st.integers(4, 16) if big else st.integers(1, 2)),
                draw(st.integers(1, 2)),
                "mig",
                mig={"layout": layout},
            )
        )
    if draw(st.booleans()) or not pools:
        pools.append(
            pool(
                "s",
                "L40S",
                draw(st.integers(4, 12) if big else st.integers(1, 2)),
                1,
                "time-slicing",
                replicas=draw(st.integers(2, 8)),
            )
        )
    base = policy(pools=pools)
    n_queues = draw(st.integers(1 if cohort is None else 2, 4 if tree else 3))
    if cohort is None:
        cohort = draw(st.booleans())
    cohorts: list[dict[str, Any]] = [{"name": "c"}] if cohort else []
    if cohort and tree:
        cohorts += _sub_cohorts(draw, base)
    queues = []
    for i in range(n_queues):
        quota: dict[str, Any] = {}
        for flavor, cap in base.capacity.items():
            share = cap // n_queues
            entry: dict[str, Any] = {"nominal": draw(st.integers(share // 2, share))}
            if cohort and draw(st.booleans()):
                entry["borrowingLimit"] = draw(st.integers(0, cap))
            if cohort and draw(st.booleans()):
                entry["lendingLimit"] = draw(st.integers(0, entry["nominal"]))
            quota[flavor] = entry
        q: dict[str, Any] = {"name": f"q{i}", "namespaces": [f"q{i}"], "quota": quota}
        if cohort:
            q["cohort"] = draw(st.sampled_from([c["name"] for c in cohorts]))
        queues.append(q)
    return policy(
        pools=pools,
        queues=queues,
        cohorts=cohorts,
        priorityClasses=CLASSES,
        scheduling={
            "minRuntimeSeconds": draw(st.sampled_from([0, 150])),
            "maxHeadWaitSeconds": draw(st.sampled_from([0, 300, 100000])),
            "queueing": draw(st.sampled_from(["best-effort-fifo", "strict-fifo"])),
        },
    )


def _sub_cohorts(draw: st.DrawFn, base: Policy) -> list[dict[str, Any]]:
    """One to three cohorts below root `c` (a chain or siblings), some with a nominal quota,
    a borrowing limit or a lending limit of their own."""
    out: list[dict[str, Any]] = []
    for i in range(draw(st.integers(1, 3))):
        parent = draw(st.sampled_from(["c", *(c["name"] for c in out)]))
        quota: dict[str, Any] = {}
        for flavor, cap in base.capacity.items():
            if not draw(st.booleans()):
                continue
            entry: dict[str, Any] = {"nominal": draw(st.integers(0, cap // 4))}
            if draw(st.booleans()):
                entry["borrowingLimit"] = draw(st.integers(0, cap))
            if draw(st.booleans()):
                entry["lendingLimit"] = draw(st.integers(0, entry["nominal"]))
            quota[flavor] = entry
        out.append({"name": f"d{i}", "parent": parent, "quota": quota})
    return out


def random_workload(draw: st.DrawFn, p: Policy, i: int, t: int, max_pods: int = 3) -> Workload:
    kinds = []
    for f in p.flavors.values():
        kinds.append(f.kind.value if f.kind.value != "mig" else f"mig:{f.profile}")
    kind = draw(st.sampled_from(sorted(set(kinds))))
    pods = draw(st.integers(1, max_pods))
    kw: dict[str, Any] = {
        "pods": pods,
        "min_pods": draw(st.integers(1, pods)),
        "priority": draw(st.sampled_from(["p0", "p1", "p2"])),
        "submit": t,
        "topology": draw(st.sampled_from(["none", "none", "node", "rack"])),
    }
    if kind == "whole":
        kw["gpus"] = draw(st.sampled_from([1, 2, 4]))
    elif kind.startswith("mig:"):
        kw["mig"] = f"{draw(st.integers(1, 2))}x{kind[4:]}"
    elif draw(st.booleans()):
        kw["shared"] = 1
    else:
        kw["fraction"] = draw(st.sampled_from([100, 300, 600]))
    q = draw(st.sampled_from([q.name for q in p.queues]))
    return workload(p, f"w{i}", q, **kw)


def check_step(before: Snapshot, result: Any, after: Snapshot) -> None:
    assert step_violations(before, result, after) == []


SETTINGS = fuzz_settings(60)


def random_stream(
    data: st.DataObject, p: Policy, steps: int, per_step: int, max_pods: int, gap: int
) -> None:
    """Arrivals, cycles and completions at random; every cycle of a reused engine decides as a
    fresh one would and keeps every invariant."""
    engine = Engine()
    s = snapshot(p)
    n = 0
    for step in range(data.draw(st.integers(2, steps))):
        now = step * gap
        count = data.draw(st.integers(0, per_step))
        new = [random_workload(data.draw, p, n + i, now, max_pods) for i in range(count)]
        n += len(new)
        # carrying the recorded delta: the reused engine follows it instead of diffing states
        s = Snapshot(p, s.cluster, s.running, (*s.pending, *new), s.delta_with())
        result = engine.run_cycle(s, now)
        assert repr(result) == repr(run_cycle(s, now)), "a reused engine must decide as a fresh one"
        after = apply(s, result)
        check_step(s, result, after)
        s = after
        for rw in list(s.running):
            if data.draw(st.integers(0, 3)) == 0:
                s = finish(s, rw.workload.id)


@SETTINGS
@given(data=st.data())
def test_random_streams_keep_every_invariant(data: st.DataObject) -> None:
    random_stream(data, data.draw(clusters()), steps=6, per_step=6, max_pods=3, gap=100)


@SETTINGS
@given(data=st.data())
def test_a_closed_system_settles_without_eviction_ping_pong(data: st.DataObject) -> None:
    p = data.draw(clusters())
    ws = [
        random_workload(data.draw, p, i, data.draw(st.integers(0, 50)))
        for i in range(data.draw(st.integers(1, 12)))
    ]
    s = snapshot(p)
    engine = Engine()
    evicted_by: set[tuple[str, str]] = set()
    evictions: Counter[str] = Counter()
    # arrivals in two waves, then nothing new and nothing finishes
    s = Snapshot(p, s.cluster, s.running, tuple(ws[: len(ws) // 2]))
    quiet = 0
    for step in range(40):
        if step == 1:
            s = Snapshot(p, s.cluster, s.running, (*s.pending, *ws[len(ws) // 2 :]))
        result = engine.run_cycle(s, 1000 + step * 200)
        for ev in result.evictions:
            assert (ev.by, ev.workload) not in evicted_by, f"{ev.workload} evicted {ev.by} back"
            evicted_by.add((ev.workload, ev.by))
            evictions[ev.workload] += 1
        s = apply(s, result)
        quiet = quiet + 1 if not result.admissions and not result.evictions else 0
        if quiet >= 2 and step > 1:
            break
    assert quiet >= 2, "the system did not settle"
    assert sum(evictions.values()) <= len(ws)


@SETTINGS
@given(data=st.data())
def test_reclaim_in_a_cohort_keeps_every_invariant(data: st.DataObject) -> None:
    p = data.draw(clusters(cohort=True))
    first, second = p.queues[0].name, p.queues[1].name
    s = snapshot(p)
    n = 0
    for step, queue in enumerate([first, first, second, second]):
        now = step * 400
        new = []
        for _ in range(data.draw(st.integers(1, 6))):
            w = random_workload(data.draw, p, n, now)
            n += 1
            if w.queue != queue:
                continue
            new.append(w)
        s = Snapshot(p, s.cluster, s.running, (*s.pending, *new))
        result = run_cycle(s, now)
        after = apply(s, result)
        check_step(s, result, after)
        s = after


@fuzz_settings(12)
@given(data=st.data())
def test_random_streams_on_clusters_of_tens_of_nodes(data: st.DataObject) -> None:
    random_stream(data, data.draw(clusters(big=True)), steps=5, per_step=20, max_pods=8, gap=200)
