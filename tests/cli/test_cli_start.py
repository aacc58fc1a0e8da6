"""The command starts at once: a command imports only what it uses (`gpucarve --help` and
`--version` none of the engine, the simulator or the Kubernetes client), and the listing's
one-line helps, kept in `gpucarve.cli.main` so that `--help` imports no command, are the
commands' own."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gpucarve.cli.main import COMMANDS, Lazy, load

HEAVY = ("gpucarve.engine", "gpucarve.sim", "gpucarve.kube", "gpucarve.config", "numpy")

PROBE = """
import json, sys
from gpucarve.cli.main import run
sys.argv = ["gpucarve", *json.loads(sys.argv[1])]
try:
    run()
except SystemExit:
    pass
print(json.dumps(sorted(m for m in sys.modules if m.startswith(("gpucarve", "numpy")))))
"""


def imported(args: list[str]) -> list[str]:
    """The modules of gpucarve (and numpy) a run of `gpucarve ARGS` imported."""
    out = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(args)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found: list[str] = json.loads(out.strip().splitlines()[-1])
    return found


@pytest.mark.parametrize("args", [["--version"], ["--help"], []])
def test_the_listing_and_the_version_import_no_command(args: list[str]) -> None:
    mods = imported(args)
    assert "gpucarve.cli.main" in mods
    assert not [m for m in mods if m.startswith(HEAVY)], mods
    assert not [m for m in mods if m.endswith("_cmd")], mods


def test_a_command_imports_its_own_module_and_not_the_others() -> None:
    mods = imported(["catalog", "list"])
    assert "gpucarve.cli.catalog_cmd" in mods
    others = {f"gpucarve.cli.{c.module}" for c in COMMANDS} - {"gpucarve.cli.catalog_cmd"}
    assert not others & set(mods), sorted(others & set(mods))
    assert not [m for m in mods if m.startswith(("gpucarve.sim", "gpucarve.kube"))]


@pytest.mark.parametrize("entry", COMMANDS, ids=lambda c: c.name)
def test_the_listing_says_of_each_command_what_its_own_help_says(entry: Lazy) -> None:
    cmd = load(entry)
    assert cmd.name == entry.name
    assert cmd.get_short_help_str(10_000) == entry.short
