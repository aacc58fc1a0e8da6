"""How long `gpucarve` takes to start: CPU seconds (user + system, of the process and its
children) of `--version`, `--help`, `explain --help` and `validate` of the policy `gpucarve
init` writes, median of `--runs` runs each.

    python bench/cli_start.py [--runs 5] [--baseline REF] [--json]

`--baseline REF` measures the tree at git REF too (a temporary worktree), interleaved run by
run with this one on the same machine, and prints each figure's ratio (this / REF).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from figures import print_figures

ROOT = Path(__file__).resolve().parents[1]
CASES = {
    "version": ["--version"],
    "help": ["--help"],
    "explain_help": ["explain", "--help"],
    "validate": ["validate", "{policy}"],
}


def cpu_of(src: Path, args: list[str]) -> float:
    """CPU seconds of one `python -m gpucarve ARGS` run from the sources at `src`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = {**os.environ, "PYTHONPATH": str(src)}
    subprocess.run(
        [sys.executable, "-m", "gpucarve", *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure(trees: dict[str, Path], policy: Path, runs: int) -> dict[str, object]:
    samples: dict[tuple[str, str], list[float]] = {}
    for _ in range(runs):
        for case, args in CASES.items():
            argv = [a.format(policy=policy) for a in args]
            for label, src in trees.items():  # interleaved: a busy spell hits both
                samples.setdefault((label, case), []).append(cpu_of(src, argv))
    out: dict[str, object] = {}
    for (label, case), values in samples.items():
        out[f"{label}_{case}_cpu_s"] = round(statistics.median(values), 3)
    if "baseline" in trees:
        for case in CASES:
            now = statistics.median(samples[("this", case)])
            then = statistics.median(samples[("baseline", case)])
            out[f"ratio_{case}"] = round(now / then, 2) if then else "n/a"
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, choices=range(1, 101), metavar="1-100")
    ap.add_argument("--baseline", help="a git ref to measure side by side")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        trees = {"this": ROOT / "src"}
        if args.baseline:
            wt = work / "baseline"
            git = ["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach"]
            added = subprocess.run(
                [*git, str(wt), args.baseline], capture_output=True, text=True, check=False
            )
            if added.returncode:
                sys.exit(
                    f"--baseline {args.baseline}: not a commit git can check out "
                    f"({added.stderr.strip()}); fix: give a branch, tag or commit"
                )
            trees["baseline"] = wt / "src"
        try:
            subprocess.run(
                [sys.executable, "-m", "gpucarve", "init", str(work / "policy")],
                env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
                stdout=subprocess.DEVNULL,
                check=True,
            )
            figures = measure(trees, work / "policy" / "policy.yaml", args.runs)
        finally:
            if args.baseline:
                subprocess.run(
                    [
                        "git",
                        "-C",
                        str(ROOT),
                        "worktree",
                        "remove",
                        "--force",
                        str(work / "baseline"),
                    ],
                    check=False,
                )
    print_figures(figures, args.json)


if __name__ == "__main__":
    main()
