"""Locations the tests read from, and the public traces some tests need.

The traces are not part of the repository (see the README's Traces section for where to get
them). They are looked up in `GPUCARVE_TRACES` (default: `../shared/traces` beside the
checkout). A test that needs a missing trace is skipped with that message, except where
`GPUCARVE_REQUIRE_TRACES=1` (CI sets it): there a missing trace fails the test.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
BUILTIN = ROOT / "src" / "gpucarve" / "data" / "examples"  # shipped inside the package
WHERE = "see the README's Traces section for where to get them"


def traces_dir() -> Path:
    return Path(os.environ.get("GPUCARVE_TRACES") or ROOT.parent / "shared" / "traces")


def trace(*parts: str) -> Path:
    """A public trace file or folder; skips (or, in CI, fails) the test when it is missing."""
    path = traces_dir().joinpath(*parts)
    if not path.exists():
        message = f"public trace {path} not found (GPUCARVE_TRACES); {WHERE}"
        if os.environ.get("GPUCARVE_REQUIRE_TRACES") == "1":
            pytest.fail(message + "; CI requires them")
        pytest.skip(message)
    return path
