"""A recorded history: the `recorded` facts a trace line carries, the bounded store that keeps
the lines, the export that puts them on the trace's clock, and the replay that compares the
simulator's starts with the recorded ones."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpucarve.config.policy_build import load_policy
from gpucarve.core.problems import InvalidInput
from gpucarve.sim.history.export import jsonl, rebased, since_seconds
from gpucarve.sim.history.replay import replay, scheduler_policy
from gpucarve.sim.history.store import Bounds, HistoryStore, history_bounds
from gpucarve.sim.traces.recorded import Recorded, Stop, parse_recorded
from gpucarve.sim.traces.trace_io import load_trace
from tests.paths import BUILTIN

POLICY = load_policy(BUILTIN / "three-teams.yaml").policy
T0 = 1_796_000_000  # a Unix second, as the recorder writes them


def line(
    name: str, submit: int, gpus: int, start: int | None, end: int, **rec: Any
) -> dict[str, Any]:
    recorded = {"starts": [] if start is None else [start], "outcome": "Succeeded", "endedAt": end}
    recorded.update(rec)
    return {
        "name": name,
        "namespace": "research",
        "priorityClass": "training",
        "submitTime": submit,
        "duration": max(1, end - (start if start is not None else end)),
        "podSets": [{"count": 1, "resources": {"limits": {"nvidia.com/gpu": gpus}}}],
        "recorded": recorded,
    }


# ------------------------------------------------------------------ the recorded facts
def test_recorded_facts_survive_a_round_trip_and_a_shift() -> None:
    rec = Recorded((10, 50), (Stop(30, "Preempted"),), 90, "Succeeded", ("n1",), "gpucarve")
    again = parse_recorded(json.loads(json.dumps(rec.as_doc())))
    assert again == rec
    moved = again.shifted(10, T0)
    assert (moved.starts, moved.stops[0].at, moved.ended_at, moved.origin) == ((0, 40), 20, 80, T0)


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ({"starts": [1], "colour": "red"}, "unknown fields colour"),
        ({"outcome": "Exploded"}, "recorded.outcome"),
        ({"starts": ["soon"]}, "recorded.starts[]"),
        ({"stops": [{"at": 1, "why": "x"}]}, "recorded.stops"),
        ([], "not an object"),
    ],
)
def test_a_bad_recorded_field_is_named(raw: object, says: str) -> None:
    with pytest.raises(ValueError, match=says.replace("[", r"\[").replace("]", r"\]")):
        parse_recorded(raw)


def test_a_trace_line_with_a_bad_recorded_object_is_refused_by_line(tmp_path: Path) -> None:
    good = line("a", 0, 1, 0, 60)
    bad = line("b", 0, 1, 0, 60)
    bad["recorded"]["outcome"] = "Exploded"
    path = tmp_path / "h.jsonl"
    path.write_text(jsonl([good, bad]))
    with pytest.raises(InvalidInput) as err:
        load_trace(path, POLICY)
    assert err.value.problems[0].line == 2
    assert "recorded.outcome" in err.value.problems[0].message
    lenient = load_trace(path, POLICY, lenient=True)
    assert (len(lenient.workloads), lenient.skipped) == (1, 1)
    assert lenient.recorded["research/a"].starts == (0,)


# ------------------------------------------------------------------ the store
def test_the_store_rotates_by_size_and_keeps_at_most_its_files(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path, Bounds(max_bytes=600, max_files=3, rotate_s=10**6))
    for i in range(40):
        store.append(line(f"w{i}", T0 + i, 1, T0 + i, T0 + i + 5), T0 + i)
    files = store.files()
    assert len(files) == 3
    assert all(f.stat().st_size < 600 + 400 for f in files)
    kept = [x["name"] for x in store.lines()]
    assert kept[-1] == "w39"  # the newest are kept, in order
    assert kept == sorted(kept, key=lambda n: int(n[1:]))
    assert "w0" not in kept


def test_the_store_drops_files_past_the_age_and_filters_by_end(tmp_path: Path) -> None:
    store = HistoryStore(
        tmp_path, Bounds(max_bytes=10**6, max_files=10, rotate_s=100, max_age_s=250)
    )
    for i in range(10):
        at = T0 + 100 * i
        store.append(line(f"w{i}", at, 1, at, at + 50), at)
    names = [x["name"] for x in store.lines()]
    # a file goes once the next one starts before the cut-off (now - 250 s)
    assert names[0] in ("w6", "w7") and names[-1] == "w9"
    assert [x["name"] for x in store.lines(since=T0 + 850)] == ["w8", "w9"]


def test_a_line_cut_short_by_a_crash_is_skipped(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path)
    store.append(line("whole", T0, 1, T0, T0 + 10), T0)
    with store.files()[-1].open("a") as f:
        f.write('{"name": "cut", "namesp')
    assert [x["name"] for x in store.lines()] == ["whole"]


def test_bounds_from_megabytes_and_days_span_the_days() -> None:
    b = history_bounds(256, 90)
    assert b.max_files * b.max_bytes <= 256 * 1024 * 1024
    assert (b.max_files - 1) * b.rotate_s >= 90 * 86_400 - b.rotate_s


# ------------------------------------------------------------------ export
def test_export_puts_the_lines_on_the_first_arrivals_clock_with_unique_names() -> None:
    lines = [line("job", T0 + 30, 1, T0 + 31, T0 + 90), line("job", T0, 1, T0 + 2, T0 + 20)]
    out = rebased(lines)
    assert [(x["name"], x["submitTime"]) for x in out] == [("job", 0), ("job-run2", 30)]
    assert out[1]["recorded"]["starts"] == [31] and out[1]["recorded"]["origin"] == T0


@pytest.mark.parametrize(
    ("text", "seconds"), [("30d", 2_592_000), ("12h", 43_200), ("90m", 5400), ("45", 45)]
)
def test_since_reads_a_duration(text: str, seconds: int) -> None:
    assert since_seconds(text) == seconds


def test_since_refuses_what_is_not_a_duration() -> None:
    with pytest.raises(ValueError, match="30d"):
        since_seconds("last week")


# ------------------------------------------------------------------ replay
def _history(tmp_path: Path, lines: list[dict[str, Any]]) -> Path:
    path = tmp_path / "history.jsonl"
    path.write_text(jsonl(rebased(lines)))
    return path


def test_a_replay_of_what_the_cluster_did_matches_it_where_nothing_waits(tmp_path: Path) -> None:
    # research's room is free: each job starts the second it arrives, on the cluster and in
    # the replay alike
    lines = [line(f"j{i}", T0 + 60 * i, 1, T0 + 60 * i, T0 + 60 * i + 300, scheduler="gpucarve")
             for i in range(5)]  # fmt: skip
    trace = load_trace(_history(tmp_path, lines), POLICY)
    assert scheduler_policy(trace) == "gpucarve"
    _, fid = replay(POLICY, trace, "gpucarve")
    assert len(fid.compared) == 5
    assert fid.percentile_abs(50) == 0 and fid.percentile_abs(95) == 0


def test_a_replay_reports_how_far_a_recorded_start_is_from_the_simulated_one(
    tmp_path: Path,
) -> None:
    # the cluster started j2 40 s late (a slow bind, say): the replay starts it at arrival
    lines = [line(f"j{i}", T0 + 60 * i, 1, T0 + 60 * i + (40 if i == 2 else 0), T0 + 60 * i + 300,
                  scheduler="default-scheduler") for i in range(5)]  # fmt: skip
    never = line("never", T0 + 10, 1, None, T0 + 20, outcome="Deleted")
    trace = load_trace(_history(tmp_path, [*lines, never]), POLICY)
    assert scheduler_policy(trace) == "kube-default"
    _, fid = replay(POLICY, trace, "kube-default")
    doc = fid.as_doc()
    assert doc["compared"] == 5 and doc["never_started_on_cluster"] == 1
    assert doc["max_abs_s"] == 40 and doc["median_abs_s"] == 0
    assert doc["worst"][0] == {"workload": "research/j2", "recorded_s": 160, "simulated_s": 120}
    assert fid.mean_signed() == pytest.approx(-8.0)
