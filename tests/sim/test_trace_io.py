"""gpucarve's trace formats: CSV and JSONL, bad rows named by line, lenient mode."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpucarve.config.policy_build import load_policy
from gpucarve.core.problems import InvalidInput
from gpucarve.core.workload import GpuKind
from gpucarve.sim.traces.trace_io import CSV_COLUMNS, load_trace
from tests.paths import BUILTIN

POLICY = load_policy(BUILTIN / "three-teams.yaml").policy
# the optional idle_after column left out
HEADER = ",".join(c for c in CSV_COLUMNS if c != "idle_after") + "\n"


def test_example_traces_load() -> None:
    csv_trace = load_trace(BUILTIN / "traces" / "three-teams-small.csv", POLICY)
    assert len(csv_trace.workloads) == 7
    kinds = {w.id: w.pod_sets[0].gpu.kind for w in csv_trace.workloads}
    assert kinds["serving/ranker"] is GpuKind.MIG
    assert kinds["notebooks/nb-alice"] is GpuKind.FRACTION
    assert kinds["notebooks/nb-bob"] is GpuKind.SHARED
    assert csv_trace.utilisation["research/pretrain"] == 95.0
    jsonl = load_trace(BUILTIN / "traces" / "three-teams-small.jsonl", POLICY)
    assert [w.id for w in jsonl.workloads] == [
        "research/pretrain",
        "serving/ranker",
        "notebooks/nb-alice",
    ]


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.parametrize(
    ("row", "needle"),
    [
        ("a,research,,,0,100,1,,lots,,,,,,,,\n", "gpus is 'lots'"),
        ("a,research,,,0,,1,,1,,,,,,,,\n", "no duration"),
        ("a,research,,,0,100,1,,,3g.20gb,,,,,,,\n", "no pool of the policy serves"),
        ("a,nowhere,,,0,100,1,,1,,,,,,,,\n", "belongs to no queue"),
    ],
)
def test_bad_csv_rows_name_their_line(tmp_path: Path, row: str, needle: str) -> None:
    f = write(tmp_path, "t.csv", HEADER + "ok,research,,,0,100,1,,1,,,,,,,,\n" + row)
    with pytest.raises(InvalidInput) as exc:
        load_trace(f, POLICY)
    problem = exc.value.problems[0]
    assert problem.line == 3
    assert needle in problem.message


def test_lenient_mode_skips_and_counts(tmp_path: Path) -> None:
    rows = (
        "ok,research,,,0,100,1,,1,,,,,,,,\n"
        "bad,research,,,0,100,1,,x,,,,,,,,\n"
        "ok2,research,,,5,100,1,,1,,,,,,,,\n"
    )
    loaded = load_trace(write(tmp_path, "t.csv", HEADER + rows), POLICY, lenient=True)
    assert [w.id for w in loaded.workloads] == ["research/ok", "research/ok2"]
    assert loaded.skipped == 1 and loaded.problems[0].line == 3


def test_jsonl_errors(tmp_path: Path) -> None:
    good = '{"name": "a", "namespace": "research", "duration": 10, "podSets": [{}]}\n'
    f = write(tmp_path, "t.jsonl", good + "{broken\n")
    with pytest.raises(InvalidInput) as exc:
        load_trace(f, POLICY)
    assert exc.value.problems[0].line == 2 and "not JSON" in exc.value.problems[0].message
    f = write(tmp_path, "d.jsonl", good + good)
    with pytest.raises(InvalidInput) as exc:
        load_trace(f, POLICY)
    assert "appears twice" in exc.value.problems[0].message


def test_bad_headers_and_files(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="error"):
        load_trace(write(tmp_path, "h.csv", "name,namespace\n"), POLICY)
    with pytest.raises(InvalidInput) as exc:
        load_trace(write(tmp_path, "u.csv", HEADER.strip() + ",colour\n"), POLICY)
    assert "unknown column" in exc.value.problems[0].message
    with pytest.raises(InvalidInput) as exc:
        load_trace(tmp_path / "missing.csv", POLICY)
    assert exc.value.problems[0].code == "file-not-found"
    with pytest.raises(InvalidInput) as exc:
        load_trace(write(tmp_path, "e.jsonl", "\n"), POLICY)
    assert exc.value.problems[0].code == "empty-trace"
