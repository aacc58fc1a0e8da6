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


def _policy(nominal: int) -> dict[str, object]:
    return {
        "apiVersion": "gpucarve.io/v1alpha1", "kind": "Policy", "metadata": {"name": "p"},
        "pools": [{"name": "train", "gpuModel": "H100-SXM5-80GB", "nodes": 2, "gpusPerNode": 8,
                   "sharing": "exclusive"}],
        "queues": [{"name": "research", "namespaces": ["research"],
                    "quota": {"h100-full": {"nominal": nominal}}}],
    }  # fmt: skip


def test_the_gain_seen_after_a_change_is_set_beside_the_one_predicted(tmp_path: Path) -> None:
    """Recorded under a quota of 16 GPUs: four 8-GPU jobs of 100 s arriving together ran two
    at a time. Replayed under the old quota of 8 they run one at a time: the change took
    research's wait p95 from 300 s to 100 s, and the replay under the new quota agrees."""
    lines = []
    for i in range(4):
        start = 100 * (i // 2)
        lines.append(json.dumps({
            "name": f"j{i}", "namespace": "research", "submitTime": 0, "duration": 100,
            "podSets": [{"count": 1, "resources": {"limits": {"nvidia.com/gpu": 8}}}],
            "recorded": {"starts": [start], "endedAt": start + 100, "outcome": "Succeeded",
                         "scheduler": "gpucarve"}}))  # fmt: skip
    history = tmp_path / "h.jsonl"
    history.write_text("\n".join(lines) + "\n")
    old, new = tmp_path / "old.yaml", tmp_path / "new.yaml"
    old.write_text(json.dumps(_policy(8)))
    new.write_text(json.dumps(_policy(16)))
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"recommendation": {"chosen": "more", "judged": [
        {"policy": "the policy as read", "wait_p95_h": {"research": 0.1}},
        {"policy": "more", "wait_p95_h": {"research": 0.04}}]}}))  # fmt: skip
    code, text = run("history", "gain", str(history), "--before", str(old), "--policy", str(new),
                     "--predicted", str(results), "--json")  # fmt: skip
    assert code == 0, text
    (row,) = json.loads(text)["queues"]
    assert row["recorded_wait_p95_h"] == round(100 / 3600, 3)
    assert row["old_policy_wait_p95_h"] == round(300 / 3600, 3)
    assert row["new_policy_wait_p95_h"] == row["recorded_wait_p95_h"]
    assert row["seen_change_h"] == row["replayed_change_h"] == round(
        round(100 / 3600, 3) - round(300 / 3600, 3), 3)  # fmt: skip
    assert row["predicted_change_h"] == -0.06
    code, text = run("history", "gain", str(history), "--before", str(old), "--policy", str(new))
    assert code == 0 and "seen against predicted" in text, text
    code, text = run("history", "gain", str(history), "--before", str(old), "--predicted",
                     str(history))  # fmt: skip
    assert code == 2 and "--predicted [" in text and "fix:" in text, text
