"""An inference load that scales: replicas follow the HPA's rules (bounds, stabilization
windows, rate limits) over the day, each replica is a workload of the entry's queue and
priority from its scale-up to its scale-down, and `simulate` replays them."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import yaml
from typer.testing import CliRunner

from gpucarve.cli.main import app
from gpucarve.config.policy_build import load_policy
from gpucarve.core.policy import Autoscale
from gpucarve.sim.run.inference_scaling import inference_load, replica_schedule, replica_workloads
from tests.paths import BUILTIN

DAY = 86_400


def _policy_file(tmp_path: Path, **entry: object) -> Path:
    doc = yaml.safe_load((BUILTIN / "three-teams.yaml").read_text())
    doc["autoscaling"] = [{"deployment": "chat", "namespace": "serving", "minReplicas": 2,
                           "maxReplicas": 8, "resources": {"nvidia.com/mig-3g.40gb": 1},
                           "priorityClass": "production-critical", **entry}]  # fmt: skip
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _entry(tmp_path: Path, **entry: object) -> Autoscale:
    (a,) = load_policy(_policy_file(tmp_path, **entry)).policy.autoscaling
    return a


def test_replicas_follow_the_day_within_bounds_and_rates(tmp_path: Path) -> None:
    a = _entry(tmp_path)
    schedule = replica_schedule(a, 2 * DAY, seed=1)
    assert schedule[0][0] == 0 and 2 <= schedule[0][1] <= 4  # 03:00 is the trough
    counts = [n for _, n in schedule]
    assert min(counts) == 2 and max(counts) == 8  # the trough and the peak are reached
    for (t0, n0), (t1, n1) in itertools.pairwise(schedule):
        assert t1 > t0
        assert n1 - n0 <= max(2, n0)  # scale-up rate limit
        assert n0 - n1 <= 1  # scale-down rate limit
    at = lambda t: [n for s, n in schedule if s <= t][-1]  # noqa: E731
    assert at(15 * 3600) >= 7 and at(3 * 3600 + DAY) <= 3  # 15:00 busy, 03:00 quiet
    assert schedule == replica_schedule(a, 2 * DAY, seed=1)
    assert schedule != replica_schedule(a, 2 * DAY, seed=2)


def test_longer_stabilization_windows_flap_less(tmp_path: Path) -> None:
    a = _entry(tmp_path)
    eager = dataclasses.replace(a, up_window_s=0, down_window_s=0)
    calm = dataclasses.replace(a, up_window_s=300, down_window_s=3600)
    changes = {k: len(replica_schedule(x, DAY, seed=3)) for k, x in (("eager", eager),
                                                                    ("calm", calm))}  # fmt: skip
    assert changes["calm"] < changes["eager"] / 2, changes


def test_each_replica_is_a_workload_from_scale_up_to_scale_down(tmp_path: Path) -> None:
    policy = load_policy(_policy_file(tmp_path)).policy
    (a,) = policy.autoscaling
    schedule = replica_schedule(a, DAY, seed=1)
    replicas = replica_workloads(policy, a, schedule, DAY)
    for t, n in schedule:
        alive = [w for w in replicas
                 if w.submit_time <= t < w.submit_time + (w.duration or 0)]  # fmt: skip
        assert len(alive) == n, (t, n, len(alive))
    w = replicas[0]
    assert (w.queue, w.priority_class) == ("production", "production-critical")
    assert w.id.startswith("serving/chat-replica-")
    assert w.pod_sets[0].gpu.profile == "3g.40gb"
    workloads, busy = inference_load(policy, DAY, seed=1)
    assert [x.id for x in workloads] == [x.id for x in replicas]
    assert set(busy.values()) == {70.0}


def test_simulate_replays_the_scaling_inference_load(tmp_path: Path) -> None:
    path = _policy_file(tmp_path)
    args = ["simulate", "--policy", str(path), "--days", "0.5", "--seed", "7",
            "--compare", "gpucarve", "--json"]  # fmt: skip
    runner = CliRunner()
    plain = runner.invoke(app, ["simulate", "--days", "0.5", "--seed", "7", "--compare",
                                "gpucarve", "--json", "--out", str(tmp_path / "p")])  # fmt: skip
    one = runner.invoke(app, [*args, "--out", str(tmp_path / "a")])
    two = runner.invoke(app, [*args, "--out", str(tmp_path / "b")])
    assert one.exit_code == 0 and two.exit_code == 0 and plain.exit_code == 0, one.output
    assert (tmp_path / "a" / "results.json").read_bytes() == (
        tmp_path / "b" / "results.json").read_bytes()  # fmt: skip
    scaled = yaml.safe_load((tmp_path / "a" / "results.json").read_text())["results"]["gpucarve"]
    base = yaml.safe_load((tmp_path / "p" / "results.json").read_text())["results"]["gpucarve"]
    policy = load_policy(path).policy
    replicas, _ = inference_load(policy, DAY // 2, seed=7)
    assert scaled["workloads"] == base["workloads"] + len(replicas)
    assert scaled["teams"]["production"]["gpu_hours"] > base["teams"]["production"]["gpu_hours"]
