"""The property and fuzz tests at a longer budget than CI's, with fresh random examples.

    python bench/fuzz.py [--scale 20] [--seed N]

Runs tests/fuzz/ and tests/engine/test_properties.py with GPUCARVE_FUZZ_SCALE (CI runs them at
1: some 1,500 examples) and prints, per test, the examples drawn and the time, then the
totals. A failure prints Hypothesis's smallest falsifying example; rerun it with the seed the
run printed. Not a test: it asserts nothing about time and is not part of `make test`.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGETS = ["tests/fuzz", "tests/engine/test_properties.py"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=20.0, help="times CI's example budget")
    ap.add_argument("--seed", type=int, default=None, help="Hypothesis seed (default: random)")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    env = {**os.environ, "GPUCARVE_FUZZ_SCALE": str(args.scale), "GPUCARVE_FUZZ_SEED": str(seed)}
    cmd = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--hypothesis-seed",
        str(seed), "--hypothesis-show-statistics", *TARGETS,
    ]  # fmt: skip
    print(f"scale {args.scale:g}, seed {seed}: {' '.join(cmd[3:])}", flush=True)
    started = time.monotonic()
    run = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    took = time.monotonic() - started
    examples = 0
    stats = re.findall(
        r"^(tests/\S+::\S+):\n\n  - during generate phase \(([\d.]+) seconds\):\n.*\n"
        r"    - (\d+) passing",
        run.stdout,
        flags=re.M,
    )
    for name, seconds, passing in stats:
        examples += int(passing)
        print(f"{name}: {passing} examples in {float(seconds):.1f} s")
    tail = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else run.stderr[-500:]
    print(f"total: {examples} examples in {took:.0f} s; pytest: {tail}")
    if run.returncode != 0:
        print(run.stdout[-20000:])
    return run.returncode


if __name__ == "__main__":
    sys.exit(main())
