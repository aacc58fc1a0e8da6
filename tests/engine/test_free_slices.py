"""The working state's count of free slices per flavor (what the idle accounting reads each
cycle) stays equal to a recount of every GPU's free slices, through cycles that take, give back
and roll back, and through snapshots followed by their steps."""

from __future__ import annotations

import random

import pytest

from gpucarve.core.snapshot import Snapshot
from gpucarve.engine import Engine, idle
from gpucarve.engine.apply import apply, finish
from gpucarve.engine.working import Working
from tests.engine.builders import policy, pool, queue, snapshot, workload


def recount(ws: Working) -> dict[str, int]:
    out = dict.fromkeys(ws.flavors, 0)
    for node in ws.nodes:
        for name, gpus in node.gpus.items():
            out[name] += sum(len(g.free) for g in gpus)
    return out


def test_free_slices_follow_takes_give_backs_rollbacks_and_steps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    p = policy(
        pools=[
            pool("h", "H100-SXM5-80GB", 3, 8),
            pool("m", "A100-80GB", 2, 2, "mig",
                 mig={"layout": {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}}),
            pool("s", "L40S", 2, 2, "time-slicing", replicas=4),
        ],
        cohorts=[{"name": "c"}],
        queues=[
            queue(n, {"h100-full": {"nominal": 12}, "a100-mig-1g.10gb": {"nominal": 4},
                      "a100-mig-3g.40gb": {"nominal": 2}, "l40s-shared": {"nominal": 8}},
                  cohort="c")
            for n in ("a", "b")
        ],
        priorityClasses=[{"name": "lo", "value": 0, "preemptible": True, "default": True},
                         {"name": "hi", "value": 9, "preemptible": True}],
        scheduling={"minRuntimeSeconds": 0},
    )  # fmt: skip
    seen = []
    account = idle.account

    def checked(c: object) -> object:
        ws = c.ws  # type: ignore[attr-defined]
        seen.append(ws.free_slices == recount(ws))  # at the cycle's end, before rollback
        return account(c)  # type: ignore[arg-type]

    monkeypatch.setattr("gpucarve.engine.cycle.idle.account", checked)
    rng = random.Random(3)
    engine, s = Engine(), snapshot(p)
    ws = None
    changed = 0
    for step in range(15):
        new = []
        for i in range(rng.randint(1, 5)):
            kind = rng.choice(["gpus", "mig", "shared"])
            if kind == "gpus":
                kw: dict[str, object] = {"gpus": rng.choice([1, 2, 8])}
            elif kind == "mig":
                kw = {"mig": rng.choice(["1g.10gb", "3g.40gb"])}
            else:
                kw = {"shared": 1}
            new.append(
                workload(
                    p,
                    f"w{step}-{i}",
                    rng.choice("ab"),
                    pods=rng.randint(1, 3),
                    priority=rng.choice(["lo", "hi"]),
                    submit=step,
                    **kw,
                )
            )
        s = Snapshot(p, s.cluster, s.running, (*s.pending, *new), s.delta)
        result = engine.run_cycle(s, step * 10)
        ws = engine._ws
        assert ws is not None
        assert ws.free_slices == recount(ws)  # after the cycle, its own changes kept
        s = apply(s, result)
        done = [rw.workload.id for rw in s.running if rng.random() < 0.3]
        s = finish(s, *done)
        changed += len(result.admissions) + len(done)
    assert changed > 10  # the cluster did change under the count
    assert len(seen) == 15 and all(seen)
    assert ws is not None
    assert sum(ws.free_slices.values()) < sum(recount(Working(snapshot(p))).values())
