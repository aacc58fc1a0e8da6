"""`gpucarve history`: bad arguments are refused naming the option and the fix; an export of a
store reads back as the trace `history replay` compares."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpucarve.cli.main import app
from gpucarve.sim.history.store import HistoryStore
from tests.paths import BUILTIN

T0 = 1_796_000_000


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["history", "export"], "pass exactly one of --dir or --url"),
        (
            ["history", "export", "--dir", "a", "--url", "http://x"],
            "pass exactly one of --dir or --url",
        ),
        (["history", "export", "--dir", "no-such-folder"], "is not a folder"),
        (["history", "export", "--url", "ftp://x"], "not an http(s) address"),
        (["history", "export", "--url", "http://127.0.0.1:9", "--since", "last week"], "30d"),
        (["history", "export", "--url", "http://127.0.0.1:9"], "did not answer"),
        (["history", "export", "--dir", ".", "--out", "/no-such-folder/h.jsonl"], "cannot-write"),
    ],
)
def test_bad_export_arguments_are_refused_with_the_fix(args: list[str], says: str) -> None:
    code, out = run(*args)
    assert code != 0
    assert says in out and "fix:" in out


def test_a_trace_without_recorded_starts_is_not_a_history() -> None:
    code, out = run("history", "replay", str(BUILTIN / "traces" / "three-teams-small.jsonl"))
    assert code != 0 and "not-a-history" in out and "history export" in out


def test_an_exported_store_replays(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "kept")
    for i in range(3):
        at = T0 + 100 * i
        line = {"name": f"j{i}", "namespace": "research", "priorityClass": "training",
                "submitTime": at, "duration": 50,
                "podSets": [{"count": 1, "resources": {"limits": {"nvidia.com/gpu": 2}}}],
                "recorded": {"starts": [at + 1], "endedAt": at + 51, "outcome": "Succeeded",
                             "scheduler": "gpucarve"}}  # fmt: skip
        store.append(line, at + 51)
    out = tmp_path / "h.jsonl"
    code, text = run("history", "export", "--dir", str(tmp_path / "kept"), "--out", str(out))
    assert code == 0, text
    assert [json.loads(x)["submitTime"] for x in out.read_text().splitlines()] == [0, 100, 200]
    code, text = run("history", "replay", str(out), "--json")
    assert code == 0, text
    doc = json.loads(text[text.index("{") :])
    # each started a second after it arrived on the cluster, at once in the replay
    assert (doc["policy"], doc["compared"], doc["median_abs_s"], doc["mean_signed_s"]) == (
        "gpucarve", 3, 1, -1.0)  # fmt: skip
