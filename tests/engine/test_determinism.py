"""Same snapshot and clock give the same result byte for byte, also across processes with
different string hashing (so no decision depends on set or dict-of-hash order)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.paths import ROOT

SCRIPT = r"""
import hashlib, random
from tests.engine.builders import policy, pool, queue, snapshot, workload
from gpucarve.engine import Engine
from gpucarve.engine.apply import apply, finish
from gpucarve.core.snapshot import Snapshot

p = policy(
    pools=[pool("h", "H100-SXM5-80GB", 3, 8, topology={"nodesPerRack": 2}),
           pool("m", "A100-80GB", 2, 2, "mig",
                mig={"layout": {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}}),
           pool("s", "L40S", 2, 1, "time-slicing", replicas=4)],
    cohorts=[{"name": "c"}],
    queues=[queue(n, {"h100-full": {"nominal": 12}, "a100-mig-1g.10gb": {"nominal": 4},
                      "a100-mig-3g.40gb": {"nominal": 2}, "l40s-shared": {"nominal": 4}},
                  cohort="c")
            for n in ("a", "b")],
    priorityClasses=[{"name": "lo", "value": 0, "preemptible": True, "default": True},
                     {"name": "hi", "value": 9, "preemptible": True}],
    scheduling={"minRuntimeSeconds": 0},
)
rng = random.Random(7)
engine, s, digest = Engine(), snapshot(p), hashlib.sha256()
for step in range(12):
    new = []
    for i in range(rng.randint(0, 5)):
        kind = rng.choice(["gpus", "mig", "shared"])
        kw = {"gpus": rng.choice([1, 2, 8])} if kind == "gpus" else (
            {"mig": rng.choice(["1g.10gb", "3g.40gb"])} if kind == "mig" else {"shared": 1})
        new.append(workload(p, f"w{step}-{i}", rng.choice("ab"), pods=rng.randint(1, 3),
                            priority=rng.choice(["lo", "hi"]), submit=step, **kw))
    s = Snapshot(p, s.cluster, s.running, (*s.pending, *new))
    result = engine.run_cycle(s, step * 10)
    digest.update(repr(result).encode())
    s = apply(s, result)
    done = [rw.workload.id for rw in s.running if rng.random() < 0.3]
    s = finish(s, *done)
print(digest.hexdigest())
"""


# the same run with the collector running through every cycle, and collecting at every chance
COLLECTING = (
    "import gc, contextlib\n"
    "import gpucarve.engine.engine as e\n"
    "e.collector_paused = contextlib.nullcontext\n"
    "gc.set_threshold(1, 1, 1)\n"
)


def run_with_seed(seed: str, prelude: str = "") -> str:
    env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'src'}"}
    proc = subprocess.run(
        [sys.executable, "-c", prelude + SCRIPT],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_results_do_not_depend_on_hash_seed() -> None:
    first = run_with_seed("1")
    assert len(first) == 64
    assert run_with_seed("2") == first
    assert run_with_seed("12345") == first


def test_results_do_not_depend_on_when_garbage_is_collected() -> None:
    assert run_with_seed("1", COLLECTING) == run_with_seed("1")


def test_a_cycle_holds_the_collector_off_and_puts_it_back_as_it_was() -> None:
    import gc

    from gpucarve.engine.engine import collector_paused

    was = gc.isenabled()
    try:
        gc.enable()
        with collector_paused():
            assert not gc.isenabled()
        assert gc.isenabled()
        gc.disable()
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # a host that turned it off keeps it off
        gc.enable()
        try:
            with collector_paused():
                raise RuntimeError("a cycle that fails")
        except RuntimeError:
            pass
        assert gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()
