"""`dev-cluster` from a pip install: the test environment's binaries are found in the per-user
cache `tools/testenv.sh` fills, or the error says exactly how to get them."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpucarve.devcluster import stack
from gpucarve.devcluster.procs import StackError
from gpucarve.devcluster.stack import BINARIES, find_binaries


def _fill(folder: Path, names: tuple[str, ...] = BINARIES) -> Path:
    folder.mkdir(parents=True)
    for b in names:
        (folder / b).write_text("")
    return folder


def test_a_pip_install_finds_the_newest_complete_folder_in_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GPUCARVE_TESTENV_BIN", raising=False)
    monkeypatch.setenv("GPUCARVE_TESTENV_CACHE", str(tmp_path))
    monkeypatch.setattr(stack, "checkout_script", lambda: tmp_path / "no-such-script.sh")
    _fill(tmp_path / "bin-v1.36.3-a")
    newest = _fill(tmp_path / "bin-v1.37.2-a")
    _fill(tmp_path / "bin-v1.38.0-a", BINARIES[:2])  # incomplete: a build cut short
    assert find_binaries() == newest


def test_without_a_cache_the_error_says_how_to_get_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GPUCARVE_TESTENV_BIN", raising=False)
    monkeypatch.setenv("GPUCARVE_TESTENV_CACHE", str(tmp_path / "empty"))
    monkeypatch.setattr(stack, "checkout_script", lambda: tmp_path / "no-such-script.sh")
    with pytest.raises(StackError) as exc:
        find_binaries()
    text = str(exc.value)
    assert "tools/testenv.sh" in text and "GPUCARVE_TESTENV_BIN" in text
    assert str(tmp_path / "empty") in text
