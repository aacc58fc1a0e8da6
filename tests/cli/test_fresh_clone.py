"""What a newcomer meets first: the built-in example from any folder, `gpucarve init`, internal
errors as one line with exit 3, public traces that skip (or fail in CI) when absent, and two
test-environment builds at once."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpucarve.cli import main
from gpucarve.cli.main import app
from tests.paths import ROOT

GPUCARVE = [sys.executable, "-c", "from gpucarve.cli.main import run; run()"]


def outside(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The console entry point run from a folder with no examples/ and no ../shared."""
    env = {k: v for k, v in os.environ.items() if k != "GPUCARVE_DEBUG"}
    env["COLUMNS"] = "200"
    return subprocess.run(
        [*GPUCARVE, *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=600
    )


def test_the_built_in_example_works_from_any_folder(tmp_path: Path) -> None:
    r = outside("validate", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "valid policy 'three-teams'" in r.stdout and "built-in example" in r.stderr
    r = outside("plan", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert '"admissions"' in r.stdout
    r = outside("simulate", "--days", "0.1", "--compare", "gpucarve", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out" / "results.json").is_file()


def test_init_writes_a_policy_that_validates_and_never_overwrites(tmp_path: Path) -> None:
    runner = CliRunner()
    r = runner.invoke(app, ["init", str(tmp_path / "mine")])
    assert r.exit_code == 0, r.output
    policy, workloads = tmp_path / "mine" / "policy.yaml", tmp_path / "mine" / "workloads.yaml"
    assert policy.read_text().startswith("# Three teams")
    r = runner.invoke(app, ["plan", str(policy), str(workloads)])
    assert r.exit_code == 0, r.output
    policy.write_text("# mine\n")
    r = runner.invoke(app, ["init", str(tmp_path / "mine")])
    assert r.exit_code == 2 and "already exist" in r.stderr and "--force" in r.stderr
    assert policy.read_text() == "# mine\n"
    r = runner.invoke(app, ["init", "--force", str(tmp_path / "mine")])
    assert r.exit_code == 0 and policy.read_text().startswith("# Three teams")


def test_plan_with_a_policy_but_no_workloads_says_what_is_missing() -> None:
    r = CliRunner().invoke(app, ["plan", str(ROOT / "examples" / "invalid" / "unknown-key.yaml")])
    assert r.exit_code == 2 and "pass a WORKLOADS file" in r.stderr


def test_an_internal_error_is_one_line_and_exit_3(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(*_: object) -> None:
        raise RuntimeError("the engine fell over")

    monkeypatch.setattr("gpucarve.cli.common.load_policy", broken)
    monkeypatch.setattr(sys, "argv", ["gpucarve", "cluster", "summary"])
    monkeypatch.delenv("GPUCARVE_DEBUG", raising=False)
    with pytest.raises(SystemExit) as stop:
        main.run()
    assert stop.value.code == 3
    err = capsys.readouterr().err
    assert "internal error (RuntimeError: the engine fell over)" in err
    assert "Traceback" not in err and "please report it" in err
    monkeypatch.setenv("GPUCARVE_DEBUG", "1")
    with pytest.raises(RuntimeError, match="fell over"):
        main.run()


def test_a_missing_public_trace_skips_outside_ci_and_fails_in_ci(tmp_path: Path) -> None:
    test = tmp_path / "test_needs_trace.py"
    test.write_text(
        textwrap.dedent(
            """
            from tests.paths import trace

            def test_it():
                assert trace("alibaba-gpu-v2023", "nope.csv").exists()
            """
        )
    )
    env = {**os.environ, "GPUCARVE_TRACES": str(tmp_path / "none"), "PYTHONPATH": str(ROOT)}
    env.pop("GPUCARVE_REQUIRE_TRACES", None)
    args = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(test)]
    run = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0 and "1 skipped" in run.stdout, run.stdout
    assert "README's Traces section" in run.stdout
    env["GPUCARVE_REQUIRE_TRACES"] = "1"
    run = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 1 and "1 failed" in run.stdout and "CI requires them" in run.stdout


FAKE_GO = """#!/usr/bin/env bash
# Stands in for `go` so two builds can race in seconds: each `go build -o OUT` is slow and
# writes OUT in two steps, as the linker does.
set -e
case "$1 $2" in
  "mod init") touch go.mod ;;
  "mod download") printf '{"GoMod": "%s/kube.mod"}' "$FAKE_GO_DIR" ;;
  "env GOMODCACHE") echo "$FAKE_GO_DIR/modcache" ;;
  build*) out="$3"; printf 'part' >"$out"; sleep 1; printf ' done' >>"$out" ;;
esac
exit 0
"""


def test_two_test_environment_builds_at_once_both_succeed(tmp_path: Path) -> None:
    fake = tmp_path / "fakebin"
    fake.mkdir()
    (fake / "go").write_text(FAKE_GO)
    (fake / "go").chmod(0o755)
    (tmp_path / "kube.mod").write_text("\tk8s.io/api => ./staging/src/k8s.io/api\n")
    stages = tmp_path / "modcache" / "sigs.k8s.io" / "kwok@v0.8.0" / "kustomize" / "stage"
    for part in ("node/fast", "node/heartbeat", "pod/general"):
        (stages / part).mkdir(parents=True)
        (stages / part / "s.yaml").write_text("kind: Stage\n")
    env = {
        **os.environ,
        "PATH": f"{fake}:{os.environ['PATH']}",
        "FAKE_GO_DIR": str(tmp_path),
        "GPUCARVE_TESTENV_CACHE": str(tmp_path / "cache"),
    }
    env.pop("GPUCARVE_TESTENV_LOCKED", None)
    script = str(ROOT / "tools" / "testenv.sh")
    procs = [
        subprocess.Popen(["bash", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1].decode() for o in outs]
    bins = {Path(o[0].decode().strip()) for o in outs}
    assert len(bins) == 1
    (bin_dir,) = bins
    for name in ("etcd", "kwok", "kube-apiserver"):
        assert (bin_dir / name).read_text() == "part done"
    assert not [p.name for p in bin_dir.iterdir() if p.name.startswith(".")]
