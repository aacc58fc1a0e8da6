"""A cluster's own history, recorded and replayed: on the stack as shipped, kube-scheduler binds
one team's pods and gpucarve another's (kwok runs each for the time its annotation asks, more
work than the training pool holds, so some wait for others to end); the scheduler's recorder
keeps both, `history export` writes them as a trace, and `history replay` runs each part
through the simulator under the matching policy. Every workload has its record, and the
simulated starts are within the floor of the recorded ones (median 5 s, p95 30 s).

Beside them a real kube-state-metrics watches the pods and a real Prometheus scrapes it every
second; `import prometheus` rebuilds the same history from Prometheus alone, and recovers
nearly all of it (95 % of the GPU-hours at least) with times within a scrape."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpucarve.cli.main import app
from gpucarve.config.policy_build import load_policy
from gpucarve.devcluster.procs import free_ports
from gpucarve.devcluster.stack import LocalStack
from gpucarve.kube.api.client import Client
from gpucarve.kube.scheduler.loop import Scheduler, SchedulerConfig
from gpucarve.kube.scheduler.reactions import REACTIONS
from gpucarve.kube.scheduler.recorder import Recorder
from gpucarve.sim.history.store import HistoryStore
from tests.integration.api import Api, wait_for
from tests.integration.kube_pods import completing, create_pod, pod, pods_in
from tests.integration.stack_setup import example_policy, populated, running

pytestmark = pytest.mark.integration
THEIRS = "sandbox"  # a namespace gpucarve does not govern: kube-scheduler binds its pods
# (name, seconds after the first, GPUs, seconds it runs): 40 GPUs asked of a 32-GPU pool
WORK = [(f"w{i}", i, 8 if i % 3 == 0 else 4, 6 + (i * 5) % 9) for i in range(8)]


def _run_for(api: Api, namespace: str, name: str, gpus: int, run_s: int, scheduler: str) -> None:
    """A pod kwok completes `run_s` after it runs."""
    manifest = pod(namespace, name, "nvidia.com/gpu", gpus, scheduler=scheduler,
                   priority_class="training" if scheduler == "gpucarve" else None)  # fmt: skip
    create_pod(api, completing(api, manifest, run_s, exact=True))


def _submit_all(api: Api, namespace: str, scheduler: str) -> None:
    start = time.time()
    for name, at, gpus, run_s in WORK:
        time.sleep(max(0.0, start + at - time.time()))
        _run_for(api, namespace, name, gpus, run_s, scheduler)
    wait_for(
        lambda: (
            all(
                p.get("status", {}).get("phase") == "Succeeded"
                for p in pods_in(api, namespace).values()
            )
            and len(pods_in(api, namespace)) == len(WORK)
        ),
        timeout_s=180,
        what=f"every pod of {namespace} to run and complete",
    )


SCRAPE_S = 1
PROMETHEUS_CONFIG = """global: {{scrape_interval: {s}s, evaluation_interval: {s}s}}
scrape_configs:
  - job_name: kube-state-metrics
    static_configs: [{{targets: ["127.0.0.1:{port}"]}}]
"""


@contextmanager
def monitored(stack: LocalStack, work: Path) -> Iterator[str]:
    """kube-state-metrics on the stack and Prometheus scraping it, while the block runs: the
    address of Prometheus."""
    bins = stack.bin_dir
    ksm, telemetry, prom = free_ports(3)
    config = work / "prometheus.yaml"
    config.write_text(PROMETHEUS_CONFIG.format(s=SCRAPE_S, port=ksm))
    logs = [(work / "ksm.log").open("wb"), (work / "prometheus.log").open("wb")]
    procs = [
        subprocess.Popen(
            [str(bins / "kube-state-metrics"), f"--kubeconfig={stack.kubeconfig()}",
             "--host=127.0.0.1", f"--port={ksm}", f"--telemetry-port={telemetry}",
             "--resources=pods"],
            stdout=logs[0], stderr=subprocess.STDOUT,
        ),
        subprocess.Popen(
            [str(bins / "prometheus"), f"--config.file={config}",
             f"--storage.tsdb.path={work / 'tsdb'}", f"--web.listen-address=127.0.0.1:{prom}"],
            stdout=logs[1], stderr=subprocess.STDOUT,
        ),
    ]  # fmt: skip
    url = f"http://127.0.0.1:{prom}"
    try:
        wait_for(lambda: _up(f"{url}/api/v1/query?query=up%3D%3D1"), timeout_s=60,
                 what="Prometheus scraping kube-state-metrics")  # fmt: skip
        yield url
    finally:
        for p in procs:
            p.terminate()
            p.wait(30)
        for f in logs:
            f.close()


def _up(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return bool(json.loads(reply.read())["data"]["result"])
    except (OSError, ValueError, KeyError):
        return False


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """The recorded history exported as a trace, the policy the replay runs by, and the
    history `import prometheus` rebuilt of the same run."""
    work = tmp_path_factory.mktemp("history")
    policy_file = example_policy(work)
    replay_policy = _replay_policy(policy_file, work)
    with (
        populated(work, policy_file, ["research", THEIRS]) as (stack, api, _),
        monitored(stack, work) as prometheus,
    ):
        store = HistoryStore(work / "kept")
        recorder = Recorder(store, linger_s=1)
        sched = Scheduler(
            Client.from_kubeconfig(stack.kubeconfig()),
            load_policy(policy_file, []).policy,
            SchedulerConfig(interval_s=0.5, check_invariants=True),
            reactions=(*REACTIONS, recorder),
        )
        with running(sched):
            _submit_all(api, THEIRS, "default-scheduler")
            _submit_all(api, "research", "gpucarve")
            wait_for(lambda: not recorder.open, timeout_s=30, what="every workload written")
        exported = _export(work / "kept", work / "history.jsonl")
        time.sleep(3 * SCRAPE_S)  # the last completions scraped
        imported = work / "imported.jsonl"
        args = ["import", "prometheus", "--url", prometheus, "--since", "1h", "--step",
                str(SCRAPE_S), "--policy", str(replay_policy), "--out", str(imported)]  # fmt: skip
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
    return exported, replay_policy, imported


def _replay_policy(policy_file: Path, work: Path) -> Path:
    """The policy with the namespace gpucarve did not govern mapped to a queue, as an adopted
    policy would have it."""
    doc = yaml.safe_load(policy_file.read_text())
    for q in doc["queues"]:
        if q["name"] == "research":
            q["namespaces"].append(THEIRS)
    path = work / "replay-policy.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _export(folder: Path, out: Path) -> Path:
    result = CliRunner().invoke(app, ["history", "export", "--dir", str(folder), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def _part(history: Path, scheduler: str) -> Path:
    lines = [json.loads(x) for x in history.read_text().splitlines()]
    part = history.with_name(f"{scheduler}.jsonl")
    part.write_text(
        "".join(json.dumps(x) + "\n" for x in lines if x["recorded"]["scheduler"] == scheduler)
    )
    return part


def _replay(history: Path, policy: Path) -> dict[str, Any]:
    result = CliRunner().invoke(
        app, ["history", "replay", str(history), "--policy", str(policy), "--json"]
    )
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.output))


def test_every_workload_on_either_scheduler_has_its_record(
    recorded: tuple[Path, Path, Path],
) -> None:
    history, _, _ = recorded
    lines = [json.loads(x) for x in history.read_text().splitlines()]
    by = {(x["namespace"], x["name"]): x for x in lines}
    for ns, scheduler in ((THEIRS, "default-scheduler"), ("research", "gpucarve")):
        for name, _, gpus, run_s in WORK:
            line = by[(ns, name)]
            rec = line["recorded"]
            assert rec["scheduler"] == scheduler and rec["outcome"] == "Succeeded"
            assert len(rec["starts"]) == 1 and rec["nodes"]
            assert line["podSets"][0]["resources"]["limits"]["nvidia.com/gpu"] == str(gpus)
            # held from its binding to its end: kwok's own stages take seconds (jittered, more
            # on a busy machine) to run a bound pod, then it ends `run_s` later
            assert line["duration"] == rec["endedAt"] - rec["starts"][0]
            assert run_s - 1 <= line["duration"] <= run_s + 20, (ns, name, line["duration"])
    # the pool held less than was asked: some work waited for other work to end
    waited = [x for x in lines if x["recorded"]["starts"][0] - x["submitTime"] >= 3]
    assert waited, "no workload waited: the scenario does not test queueing"


@pytest.mark.parametrize(
    ("scheduler", "as_policy"), [("default-scheduler", "kube-default"), ("gpucarve", "gpucarve")]
)
def test_the_replay_starts_work_when_the_cluster_did(
    recorded: tuple[Path, Path, Path], scheduler: str, as_policy: str
) -> None:
    history, policy, _ = recorded
    doc = _replay(_part(history, scheduler), policy)
    print(f"{scheduler} replayed as {as_policy}: {json.dumps(doc, sort_keys=True)}")
    assert doc["policy"] == as_policy
    assert doc["compared"] == len(WORK) and doc["not_started_in_replay"] == 0
    assert doc["median_abs_s"] <= 5, doc
    assert doc["p95_abs_s"] <= 30, doc


def _gpu_hours(line: dict[str, Any]) -> float:
    limits = line["podSets"][0]["resources"]["limits"]
    return (
        int(limits["nvidia.com/gpu"]) * int(line["podSets"][0]["count"]) * line["duration"] / 3600
    )


def test_prometheus_alone_gives_back_the_recorded_history(
    recorded: tuple[Path, Path, Path],
) -> None:
    history, policy, imported = recorded
    mine = {
        (x["namespace"], x["name"]): x for x in map(json.loads, history.read_text().splitlines())
    }
    theirs = {
        (x["namespace"], x["name"]): x for x in map(json.loads, imported.read_text().splitlines())
    }
    found = [k for k in mine if k in theirs]
    share = sum(_gpu_hours(mine[k]) for k in found) / sum(_gpu_hours(x) for x in mine.values())
    print(f"import prometheus: {len(found)} of {len(mine)} workloads, {share:.1%} of GPU-hours")
    assert share >= 0.95
    # each history counts from its own first arrival (`recorded.origin`): compare in Unix time
    shift = next(iter(mine.values()))["recorded"]["origin"]
    shift -= next(iter(theirs.values()))["recorded"]["origin"]
    for k in found:
        a, b = mine[k], theirs[k]
        assert abs(a["submitTime"] - (b["submitTime"] - shift)) <= SCRAPE_S + 1, k
        assert (
            abs(a["recorded"]["starts"][0] - (b["recorded"]["starts"][0] - shift)) <= SCRAPE_S + 1
        ), k
        assert abs(a["recorded"]["endedAt"] - (b["recorded"]["endedAt"] - shift)) <= SCRAPE_S + 1, k
        assert (
            b["recorded"]["outcome"] == "Succeeded"
            and b["recorded"]["nodes"] == a["recorded"]["nodes"]
        )
    # and it replays as the recorder's history does
    doc = _replay(imported, policy)
    assert doc["compared"] == len(found) and doc["not_started_in_replay"] == 0
