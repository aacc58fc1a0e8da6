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
from tests.engine.builders import mixed_arrivals, mixed_policy, snapshot


def recount(ws: Working) -> dict[str, int]:
    out = dict.fromkeys(ws.flavors, 0)
    for node in ws.nodes:
        for name, gpus in node.gpus.items():
            out[name] += sum(len(g.free) for g in gpus)
    return out


def test_free_slices_follow_takes_give_backs_rollbacks_and_steps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    p = mixed_policy()
    seen = []
    account = idle.account

    def checked(c: object) -> object:
        ws = c.ws  # type: ignore[attr-defined]
        seen.append(ws.free_slices == recount(ws))  # at the cycle's end, before its commit
        return account(c)  # type: ignore[arg-type]

    monkeypatch.setattr("gpucarve.engine.cycle.idle.account", checked)
    rng = random.Random(3)
    engine, s = Engine(), snapshot(p)
    ws = None
    changed = 0
    for step in range(15):
        new = mixed_arrivals(p, rng, step)
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
