"""Golden outputs: a small seeded simulation gives byte-identical results.json.

When a deliberate change alters the results, regenerate with
`UPDATE_GOLDEN=1 .venv/bin/pytest tests/golden` and review the diff like code.
"""

from __future__ import annotations

import os
from pathlib import Path

from typer.testing import CliRunner

from gpucarve.cli.main import app
from tests.paths import BUILTIN

GOLDEN = Path(__file__).parent / "simulate-three-teams-seed7-0.5d.json"


def test_simulate_results_match_golden(tmp_path: Path) -> None:
    args = [
        "simulate",
        "--policy",
        str(BUILTIN / "three-teams.yaml"),
        "--seed",
        "7",
        "--days",
        "0.5",
    ]
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    produced = (tmp_path / "results.json").read_bytes()
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.write_bytes(produced)
    assert produced == GOLDEN.read_bytes()
