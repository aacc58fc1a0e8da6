"""The example that ships inside the package: a three-team policy, workloads for `plan`, and
a small trace, so `gpucarve validate`, `plan` and `simulate` work from any folder after
`pip install`, and `gpucarve init` can write them out for a user to edit."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

POLICY = "three-teams.yaml"
WORKLOADS = "three-teams-workloads.yaml"
TRACE_CSV = "traces/three-teams-small.csv"
TRACE_JSONL = "traces/three-teams-small.jsonl"


def example_path(name: str) -> Path:
    """A packaged example file (the package is installed as files, never zipped)."""
    return Path(str(resources.files("gpucarve").joinpath("data", "examples", name)))


def example_text(name: str) -> str:
    return resources.files("gpucarve").joinpath("data", "examples", name).read_text("utf-8")
