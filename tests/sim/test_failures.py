"""GPU failures replayed: what runs on a failed GPU starts over, nothing is placed on it until
it is repaired, the cost is counted, a rate draws the same failures from the same seed, and a
bad failure list is refused line by line."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpucarve.cli.main import app
from gpucarve.core.cluster import build_cluster
from gpucarve.core.gpu_faults import CLASSES
from gpucarve.core.policy import GpuHealth
from gpucarve.core.problems import InvalidInput
from gpucarve.sim.run.failures import RESET_S, from_rate, load_failures
from gpucarve.sim.run.metrics import summarize
from gpucarve.sim.run.records import GpuFailure, SimConfig, SimResult
from gpucarve.sim.run.runner import Simulator
from tests.engine.builders import policy, pool, queue, workload

P = policy(
    pools=[pool("h", "H100-SXM5-80GB", 2, 4)],
    queues=[queue("r", {"h100-full": {"nominal": 8}})],
)


def _run(failures: tuple[GpuFailure, ...], *ws_args: tuple[str, int, int, int]) -> SimResult:
    ws = [workload(P, n, "r", gpus=g, duration=d, submit=t) for n, g, d, t in ws_args]
    return Simulator(P, ws, config=SimConfig(gpu_failures=failures, check_invariants=True)).run()


def test_a_job_on_a_failed_gpu_starts_over_elsewhere_and_the_gpu_waits_for_repair() -> None:
    base = _run((), ("a", 4, 3600, 0))
    (iv,) = base.intervals
    gpu = f"{iv.pods[0].node}/gpu{iv.pods[0].slice_ids[0].split('/gpu')[1].split('/')[0]}"
    failed = _run((GpuFailure(600, gpu, 7200),), ("a", 4, 3600, 0), ("b", 4, 3600, 1200))
    outcomes = [(i.workload, i.outcome, i.start, i.end) for i in failed.intervals]
    assert ("r/a", "failed", 0, 600) in outcomes
    # it started over at once on the other node (4 GPUs free there), from scratch
    assert ("r/a", "completed", 600, 4200) in outcomes
    # b came at 1,200 while the failed GPU was out: only 3 of that node's GPUs were usable
    b = [o for o in outcomes if o[0] == "r/b"]
    assert b == [("r/b", "completed", 4200, 7800)], b
    (record,) = failed.gpu_failures
    assert record == (600, gpu, 7800, ("r/a",))
    s = summarize(failed, window=(0, 7800))
    assert s["gpu_failures"] == 1
    assert s["gpu_hours_lost_to_failures"] == pytest.approx(4 * 600 / 3600, abs=0.01)
    assert s["gpu_hours_out_of_service"] == 2.0
    assert s["preemptions"] == 0  # a failure is no preemption


def test_a_gpu_failing_while_idle_costs_only_its_capacity() -> None:
    r = _run((GpuFailure(0, "h-1/gpu0", 100),), ("a", 4, 3600, 10))
    assert [i.outcome for i in r.intervals] == ["completed"]
    assert r.gpu_failures == [(0, "h-1/gpu0", 100, ())]


def test_a_rate_draws_the_same_failures_from_the_same_seed() -> None:
    cluster = build_cluster(P)
    a = from_rate(cluster, 0.5, 3600, 10 * 86_400, seed=3)
    assert a == from_rate(cluster, 0.5, 3600, 10 * 86_400, seed=3)
    assert a != from_rate(cluster, 0.5, 3600, 10 * 86_400, seed=4)
    assert 20 <= len(a) <= 70  # 8 GPUs × 10 days × 0.5 = 40 expected
    by_gpu: dict[str, list[GpuFailure]] = {}
    for f in a:
        by_gpu.setdefault(f.gpu, []).append(f)
    for fs in by_gpu.values():  # a GPU fails again only after its repair
        assert all(x.at_s + x.repair_s <= y.at_s for x, y in itertools.pairwise(fs))
    assert from_rate(cluster, 0.0, 3600, 86_400, seed=3) == ()


def test_a_bad_failure_list_is_refused_line_by_line(tmp_path: Path) -> None:
    f = tmp_path / "failures.csv"
    f.write_text(
        "time_s,node,gpu,repair_s\n"
        "10,h-0,1,600\n"
        "20,nowhere,0,600\n"
        "30,h-0,9,600\n"
        "x,h-1,0,600\n"
        "40,h-1,0,0\n"
        "300,h-0,1,60\n"
    )
    with pytest.raises(InvalidInput) as err:
        load_failures(str(f), build_cluster(P))
    by_code = sorted((p.code, p.line) for p in err.value.problems)
    assert [c for c, _ in by_code].count("bad-row") == 4
    assert {line for _, line in by_code if line} == {3, 4, 5, 6}
    assert "overlapping-failures" in [c for c, _ in by_code]
    f.write_text("time_s,node,gpu,repair_s\n10,h-0,1,600\n700,h-0,1,60\n")
    assert load_failures(str(f), build_cluster(P)) == (
        GpuFailure(10, "h-0/gpu1", 600), GpuFailure(700, "h-0/gpu1", 60))  # fmt: skip


def test_simulate_replays_failures_and_refuses_two_sources(tmp_path: Path) -> None:
    runner = CliRunner()
    both = runner.invoke(app, ["simulate", "--days", "0.1", "--out", str(tmp_path / "a"),
                               "--gpu-failure-rate", "0.5", "--gpu-failures", "x.csv"])  # fmt: skip
    assert both.exit_code == 2, both.output
    assert "two-failure-sources" in both.output or "both given" in both.output
    args = ["simulate", "--days", "0.2", "--seed", "7", "--json", "--gpu-failure-rate", "1"]
    one = runner.invoke(app, [*args, "--out", str(tmp_path / "b")])
    two = runner.invoke(app, [*args, "--out", str(tmp_path / "c")])
    assert one.exit_code == 0 and two.exit_code == 0, one.output
    assert (tmp_path / "b" / "results.json").read_bytes() == (
        tmp_path / "c" / "results.json").read_bytes()  # fmt: skip
    assert '"gpu_failures": {' in (tmp_path / "b" / "results.json").read_text()


def _run_health(failures: tuple[GpuFailure, ...], health: GpuHealth | None,
                *ws_args: tuple[str, int, int, int]) -> SimResult:  # fmt: skip
    ws = [workload(P, n, "r", gpus=g, duration=d, submit=t) for n, g, d, t in ws_args]
    config = SimConfig(gpu_failures=failures, gpu_health=health, check_invariants=True)
    return Simulator(P, ws, config=config).run()


def _gpu_of(r: SimResult, name: str) -> str:
    iv = next(i for i in r.intervals if i.workload == name)
    return f"{iv.pods[0].node}/gpu{iv.pods[0].slice_ids[0].split('/gpu')[1].split('/')[0]}"


def test_under_gpucarve_the_class_decides_the_drain_and_the_time_back() -> None:
    health = GpuHealth()
    checks = health.clean_checks * health.check_s
    gpu = _gpu_of(_run((), ("a", 4, 3600, 0)), "r/a")
    # a reset class that drains by eviction: a starts over, the GPU is back after the reset
    # and the clean checks, not after a person's repair
    f = GpuFailure(600, gpu, 7200, "memory-uncorrected")
    r = _run_health((f,), health, ("a", 4, 3600, 0))
    assert ("r/a", "failed", 0, 600) in [
        (i.workload, i.outcome, i.start, i.end) for i in r.intervals
    ]
    assert r.gpu_failures == [(600, gpu, 600 + RESET_S + checks, ("r/a",))]
    # a class that lets work finish: a runs to its end; the reset waits for it
    # (c keeps the other node busy; b comes once a is done and must wait for the GPU)
    f = GpuFailure(600, gpu, 7200, "remap-pending")
    r = _run_health((f,), health, ("a", 4, 3600, 0), ("c", 4, 20000, 0), ("b", 4, 600, 3700))
    outcomes = sorted((i.workload, i.outcome, i.start) for i in r.intervals)
    assert [o[:2] for o in outcomes] == [
        ("r/a", "completed"), ("r/b", "completed"), ("r/c", "completed")
    ]  # fmt: skip
    ((_, _, back, victims),) = r.gpu_failures
    remedy = RESET_S + checks
    assert victims == () and 3600 + remedy <= back <= 3600 + health.check_s + remedy
    assert outcomes[1][2] == back  # nothing was placed on the GPU before it was back
    # a class that needs the GPU serviced waits for the person's repair; without gpucarve
    # every class does, and its work is lost
    f = GpuFailure(600, gpu, 7200, "remap-failed")
    assert _run_health((f,), health, ("a", 4, 3600, 0)).gpu_failures[0][2] == 7800
    f = GpuFailure(600, gpu, 7200, "remap-pending")
    r = _run_health((f,), None, ("a", 4, 3600, 0))
    assert r.gpu_failures == [(600, gpu, 7800, ("r/a",))]
    # a class that is only reported takes nothing out
    f = GpuFailure(600, gpu, 7200, "throttled")
    assert _run_health((f,), health, ("a", 4, 3600, 0)).gpu_failures == []


def test_failures_are_reported_by_class_and_add_up() -> None:
    cluster = build_cluster(P)
    drawn = from_rate(cluster, 0.5, 4 * 3600, 4 * 86_400, seed=3)
    assert {f.fault_class for f in drawn} <= set(CLASSES) and len(
        {f.fault_class for f in drawn}
    ) > 2
    ws = [(f"w{i}", 4, 7200, i * 3600) for i in range(60)]
    r = _run_health(drawn, GpuHealth(), *ws)
    s = summarize(r, window=(0, 4 * 86_400))
    by_class = s["gpu_failures_by_class"]
    assert sum(c["failures"] for c in by_class.values()) == s["gpu_failures"]
    assert sum(c["gpu_hours_lost"] for c in by_class.values()) == pytest.approx(
        s["gpu_hours_lost_to_failures"], abs=0.05)  # fmt: skip
    assert sum(c["gpu_hours_out"] for c in by_class.values()) == pytest.approx(
        s["gpu_hours_out_of_service"], abs=0.05)  # fmt: skip
    # gpucarve's remedies bring GPUs back sooner than a person's four-hour repair, and the
    # classes that let work finish lose less of it
    base = summarize(_run_health(drawn, None, *ws), window=(0, 4 * 86_400))
    assert s["gpu_failure_mean_hours_to_return"] < base["gpu_failure_mean_hours_to_return"]
    assert s["gpu_hours_lost_to_failures"] < base["gpu_hours_lost_to_failures"]
