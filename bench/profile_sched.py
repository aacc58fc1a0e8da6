"""`bench/bind.py --profile`: py-spy sampling the gpucarve scheduler process while it binds, and
the functions that held the most samples (all threads; idle waits left out)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

IDLE = ("wait (threading.py", "_worker (concurrent", "select (selectors.py", "readinto (socket")


def start(pid: int, out: Path) -> subprocess.Popen[bytes]:
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).is_file():
        sys.exit("--profile needs py-spy: pip install py-spy")
    return subprocess.Popen(
        [spy, "record", "--pid", str(pid), "--format", "raw", "--rate", "50",
         "--output", str(out), "--nonblocking"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(2)  # py-spy writes its file on SIGINT
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()


def top(raw: Path, n: int = 20) -> list[tuple[str, float, float]]:
    """(function, % of busy samples in it or below it, % in it itself), most inclusive first."""
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    busy = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        if not count.isdigit() or any(f.startswith(IDLE) for f in frames[-1:]):
            continue
        k = int(count)
        busy += k
        own[frames[-1]] += k
        for f in set(frames):
            inclusive[f] += k
    if not busy:
        return []
    return [(f, 100 * c / busy, 100 * own[f] / busy) for f, c in inclusive.most_common(n)]


def report(raw: Path) -> None:
    if not raw.is_file():
        print(f"no profile: py-spy wrote nothing to {raw} (it needs ptrace: run as the same user)")
        return
    print(f"profile of the gpucarve scheduler ({raw}): % of busy samples, inclusive / own")
    for f, inc, mine in top(raw):
        print(f"  {inc:5.1f} {mine:5.1f}  {f[:110]}")
