"""The history recorder: what it makes of pods' lives (gangs, evictions and their
replacements, pods nobody bound, other schedulers' pods) as lines of the trace format, read
from the informer's changes alone."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from gpucarve.core.vocabulary import POD_GROUP_LABEL
from gpucarve.kube.scheduler.reactions import Decided, Parts
from gpucarve.kube.scheduler.recorder import Recorder
from gpucarve.sim.history.store import HistoryStore

T0 = 1_796_000_000


def stamp(t: int) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Pods:
    """The read side of a pod informer: the cache and its change log by generation."""

    def __init__(self) -> None:
        self.items: dict[str, dict[str, Any]] = {}
        self.log: list[tuple[int, str]] = []
        self.generation = 0

    def put(self, pod: dict[str, Any]) -> None:
        key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        self.items[key] = pod
        self.generation += 1
        self.log.append((self.generation, key))

    def delete(self, key: str) -> None:
        del self.items[key]
        self.generation += 1
        self.log.append((self.generation, key))

    def changes_since(
        self, generation: int
    ) -> tuple[int, dict[str, dict[str, Any] | None] | None, list[dict[str, Any]]]:
        if generation < 0:
            return self.generation, None, list(self.items.values())
        keys = {k for g, k in self.log if g > generation}
        return self.generation, {k: self.items.get(k) for k in keys}, []


class Parts_:
    def __init__(self) -> None:
        self.pods = Pods()
        self.now = T0

    def clock(self) -> datetime:
        return datetime.fromtimestamp(self.now, UTC)


def pod(
    name: str, created: int, gpus: int = 1, group: str | None = None, **status: Any
) -> dict[str, Any]:
    labels = {POD_GROUP_LABEL: group} if group else {}
    limits = {"limits": {"nvidia.com/gpu": str(gpus)}}
    return {
        "metadata": {"name": name, "namespace": "research", "creationTimestamp": stamp(created),
                     "labels": labels, "resourceVersion": "1"},
        "spec": {"schedulerName": status.pop("scheduler", "gpucarve"),
                 "priorityClassName": "training",
                 "containers": [{"name": "c", "resources": limits}]},
        "status": status,
    }  # fmt: skip


def bound(p: dict[str, Any], node: str, at: int) -> dict[str, Any]:
    out = {**p, "spec": {**p["spec"], "nodeName": node}}
    out["status"] = {"phase": "Running", "conditions": [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": stamp(at)}]}  # fmt: skip
    return out


def finished(p: dict[str, Any], at: int, phase: str = "Succeeded") -> dict[str, Any]:
    state = {"terminated": {"finishedAt": stamp(at), "exitCode": 0}}
    status = {**p["status"], "phase": phase, "containerStatuses": [{"name": "c", "state": state}]}
    return {**p, "status": status}


def evicted(p: dict[str, Any]) -> dict[str, Any]:
    cond = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
            "message": "for production/serve"}  # fmt: skip
    status = {**p["status"], "conditions": [*p["status"]["conditions"], cond]}
    return {**p, "status": status}


def cycle(rec: Recorder, s: Parts_, at: int) -> None:
    s.now = at
    rec.react(cast(Parts, s), cast(Decided, None))


def test_a_gang_starts_when_its_last_pod_is_bound_and_is_written_once_it_ended(
    tmp_path: Path,
) -> None:
    s, store = Parts_(), HistoryStore(tmp_path)
    rec = Recorder(store, linger_s=30)
    a, b = pod("g-0", T0, 4, "g"), pod("g-1", T0 + 1, 4, "g")
    s.pods.put(a)
    s.pods.put(b)
    cycle(rec, s, T0 + 2)
    s.pods.put(bound(a, "n1", T0 + 5))
    cycle(rec, s, T0 + 5)
    s.pods.put(bound(b, "n2", T0 + 6))
    cycle(rec, s, T0 + 6)
    s.pods.put(finished(bound(a, "n1", T0 + 5), T0 + 100))
    s.pods.put(finished(bound(b, "n2", T0 + 6), T0 + 102))
    cycle(rec, s, T0 + 103)
    assert list(store.lines()) == []  # lingering: a replacement may still come
    open_line = rec.open_lines(T0 + 103)[0]
    assert open_line["recorded"]["outcome"] == "Succeeded"
    cycle(rec, s, T0 + 140)
    (line,) = store.lines()
    assert line["name"] == "g" and line["submitTime"] == T0
    assert line["podSets"][0]["count"] == 2
    assert line["duration"] == 102 - 6
    assert line["recorded"] == {"starts": [T0 + 6], "outcome": "Succeeded", "endedAt": T0 + 102,
                                "nodes": ["n1", "n2"], "scheduler": "gpucarve"}  # fmt: skip
    assert rec.open == {}


def test_an_evicted_pod_and_its_replacement_are_one_workload_with_two_runs(tmp_path: Path) -> None:
    s, store = Parts_(), HistoryStore(tmp_path)
    rec = Recorder(store, linger_s=30)
    first = bound(pod("train", T0), "n1", T0 + 1)
    s.pods.put(first)
    cycle(rec, s, T0 + 1)
    s.pods.put(evicted(first))
    cycle(rec, s, T0 + 49)
    s.pods.delete("research/train")
    cycle(rec, s, T0 + 50)
    # the Job makes it again within the linger
    again = pod("train", T0 + 60)
    s.pods.put(again)
    cycle(rec, s, T0 + 60)
    s.pods.put(finished(bound(again, "n3", T0 + 70), T0 + 170))
    cycle(rec, s, T0 + 170)
    cycle(rec, s, T0 + 300)
    (line,) = store.lines()
    rec_ = line["recorded"]
    assert rec_["starts"] == [T0 + 1, T0 + 70]
    assert rec_["stops"] == [
        {"at": T0 + 50, "cause": "PreemptionByScheduler: for production/serve"}
    ]
    assert rec_["nodes"] == ["n3"] and line["duration"] == 100 and line["submitTime"] == T0


def test_work_nobody_bound_and_other_schedulers_work_are_recorded_and_cpu_pods_are_not(
    tmp_path: Path,
) -> None:
    s, store = Parts_(), HistoryStore(tmp_path)
    rec = Recorder(store, linger_s=0)
    s.pods.put(pod("waits", T0))
    s.pods.put(bound(pod("theirs", T0, scheduler="default-scheduler"), "n9", T0 + 2))
    cpu = pod("cpu", T0)
    cpu["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1"}}
    s.pods.put(cpu)
    cycle(rec, s, T0 + 3)
    s.pods.delete("research/waits")
    s.pods.put(
        finished(
            bound(pod("theirs", T0, scheduler="default-scheduler"), "n9", T0 + 2), T0 + 9, "Failed"
        )
    )
    cycle(rec, s, T0 + 10)
    lines = {x["name"]: x["recorded"] for x in store.lines()}
    assert set(lines) == {"waits", "theirs"}
    waits = {"starts": [], "outcome": "Deleted", "endedAt": T0 + 10, "scheduler": "gpucarve"}
    assert lines["waits"] == waits
    assert lines["theirs"]["scheduler"] == "default-scheduler"
    assert lines["theirs"]["outcome"] == "Failed" and lines["theirs"]["starts"] == [T0 + 2]


def test_a_relist_finds_the_pods_deleted_meanwhile(tmp_path: Path) -> None:
    s, store = Parts_(), HistoryStore(tmp_path)
    rec = Recorder(store, linger_s=0)
    s.pods.put(bound(pod("a", T0), "n1", T0))
    cycle(rec, s, T0 + 1)
    del s.pods.items["research/a"]  # gone while the watch was down: no change logged
    rec.generation = -1  # the informer relisted
    cycle(rec, s, T0 + 20)
    (line,) = store.lines()
    assert line["recorded"]["outcome"] == "Deleted" and line["recorded"]["endedAt"] == T0 + 20
