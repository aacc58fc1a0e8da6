"""`dev-cluster` from a pip install: the test environment's binaries are found in the per-user
cache `tools/testenv.sh` fills, or the error says exactly how to get them."""

from __future__ import annotations

import os
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


def test_a_checkout_uses_the_binaries_it_needs_without_waiting_for_a_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another build holds the script's lock (it builds the rest); the two binaries this
    caller runs are there: found at once, the lock never waited for."""
    import fcntl
    import subprocess

    monkeypatch.delenv("GPUCARVE_TESTENV_BIN", raising=False)
    monkeypatch.setenv("GPUCARVE_TESTENV_CACHE", str(tmp_path))
    env = {**os.environ, "GPUCARVE_TESTENV_WHERE": "1"}
    folder = Path(subprocess.run([str(stack.checkout_script())], capture_output=True, text=True,
                                 check=True, env=env).stdout.strip())  # fmt: skip
    assert folder.parent == tmp_path
    for b in ("etcd", "kube-apiserver"):
        (folder / b).write_text("")
    with (tmp_path / ".build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # as a build in another clone holds it
        said: list[str] = []
        assert find_binaries(needed=["etcd", "kube-apiserver"], progress=said.append) == folder
        assert said == []  # nothing built, nothing waited for


def test_a_build_says_what_it_does_and_that_it_still_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = tmp_path / "bin"
    script = tmp_path / "testenv.sh"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ -n "$GPUCARVE_TESTENV_WHERE" ]; then echo {built}; exit 0; fi\n'
        'echo "testenv: building etcd" >&2\n'
        "sleep 2\n"
        f"mkdir -p {built} && touch {built}/etcd && echo {built}\n"
    )
    script.chmod(0o755)
    monkeypatch.delenv("GPUCARVE_TESTENV_BIN", raising=False)
    monkeypatch.setattr(stack, "checkout_script", lambda: script)
    monkeypatch.setattr(stack, "HEARTBEAT_S", 0.5)
    said: list[str] = []
    assert find_binaries(needed=["etcd"], progress=said.append) == built
    assert said[0] == "testenv: building etcd"
    assert any(line.startswith("testenv: still building (") for line in said[1:]), said
