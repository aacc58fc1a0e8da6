"""The dashboard at scale: time to first render of each page in headless Chromium, and the
API's answer times, on bench/engine.py's cluster after one cycle.

    python bench/dashboard.py [--nodes 5000] [--pods 10000] [--runs 3] [--screenshots DIR]

The board is filled as the scheduler fills it (one cycle's snapshot and result), served by the
dashboard's own server on loopback without authentication. "First render" is from the page's
navigation start until it has drawn its data (the time the page marks itself drawn, measured
in the browser): first on a cycle nothing has been computed for yet, then `--runs` times more
(the median printed); and the API's answer time. `--screenshots DIR` also writes the pages of
the three-team example (tests/unit/dashboard/test_model.py's scenario) as PNGs, the pictures
docs/dashboard.md shows. Needs Debian's chromium and chromium-driver.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from selenium.webdriver import Chrome  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402
from tests.browser import binaries, chromium  # noqa: E402

from engine import make_policy, make_workloads  # noqa: E402
from gpucarve.core.cluster import build_cluster  # noqa: E402
from gpucarve.core.snapshot import Snapshot  # noqa: E402
from gpucarve.dashboard.access import Open  # noqa: E402
from gpucarve.dashboard.model import Frame  # noqa: E402
from gpucarve.dashboard.server import Board, app  # noqa: E402
from gpucarve.engine import Engine  # noqa: E402
from gpucarve.engine.apply import apply  # noqa: E402
from gpucarve.kube.scheduler.health import ThreadServer  # noqa: E402

READY = (
    "const m = document.getElementById('main');"
    "return m && m.dataset.ready === 'true' ? Number(m.dataset.readyAt) : null"
)


def big_frame(nodes: int, pods: int) -> Frame:
    p = make_policy(nodes)
    pending = make_workloads(p, pods, random.Random(1), 0, 0)
    snap = Snapshot(p, build_cluster(p), (), tuple(pending))
    result = Engine().run_cycle(snap, now=60)
    return Frame(snap, result)


def render_ms(d: Chrome, base: str, route: str) -> float:
    d.get(f"{base}/?r={time.monotonic_ns()}#{route}")
    got: float = WebDriverWait(d, 120).until(lambda d: d.execute_script(READY))
    return got


def api_ms(base: str, path: str) -> float:
    t0 = time.perf_counter()
    with urllib.request.urlopen(base + path, timeout=120) as r:
        r.read()
    return (time.perf_counter() - t0) * 1000


def measure(nodes: int, pods: int, runs: int) -> None:
    t0 = time.perf_counter()
    frame = big_frame(nodes, pods)
    built = time.perf_counter() - t0
    board = Board()
    board.show(frame, datetime.now(UTC).isoformat())
    server = ThreadServer(app(board, Open()), "127.0.0.1", 0, "dashboard")
    server.start()
    base = f"http://127.0.0.1:{server.port}"
    print(
        f"{nodes} nodes ({nodes * 8} GPUs), {len(frame.result.admissions)} workloads placed, "
        f"{len(frame.result.pending)} pending (cluster and cycle built in {built:.1f} s)",
        flush=True,
    )
    pages = {
        "cluster": "/api/cluster",
        "pool/h100": "/api/pools/h100",
        "node/a100-0": "/api/nodes/a100-0",
        "queues": "/api/queues",
        "pending": "/api/pending",
        "idle": "/api/idle",
    }
    try:
        with chromium() as d:
            for route, path in pages.items():
                board.show(frame, datetime.now(UTC).isoformat())  # a new generation: nothing cached
                cold = render_ms(d, base, route)
                warm = [render_ms(d, base, route) for _ in range(runs)]
                print(
                    f"  {route:<12} first render {cold:6.0f} ms on a new cycle, "
                    f"{statistics.median(warm):5.0f} ms after (median of {runs}); "
                    f"API {api_ms(base, path):5.0f} ms",
                    flush=True,
                )
    finally:
        server.stop()


def showcase() -> list[Frame]:
    """The three-team example mid-day: every pool in use by its teams, a GPU out of service,
    MIG instances of several profiles, work waiting; two cycles, so the history has a line."""
    from tests.engine.builders import workload
    from tests.unit.dashboard.test_model import OUT, TOLERATE, scenario

    first = scenario()
    p = first.snapshot.policy
    mix = [
        *(
            workload(p, f"svc{i}", "production", mig="3g.40gb", tolerations=TOLERATE)
            for i in range(5)
        ),
        *(
            workload(p, f"emb{i}", "production", mig="1g.10gb", tolerations=TOLERATE)
            for i in range(6)
        ),
        *(
            workload(p, f"ft{i}", "data-science", mig="2g.20gb", tolerations=TOLERATE)
            for i in range(4)
        ),
        *(workload(p, f"nb{i}", "data-science", shared=1) for i in range(14)),
        *(workload(p, f"dbg{i}", "research", shared=1) for i in range(5)),
    ]
    s = apply(first.snapshot, first.result)
    s = Snapshot(p, s.cluster, s.running, (*s.pending, *mix))
    s = apply(s, Engine().run_cycle(s, 120))
    late = [
        workload(p, "pretrain", "research", gpus=8, pods=2, tolerations=TOLERATE, submit=200),
        workload(p, "llm-7b", "production", mig="3g.40gb", tolerations=TOLERATE, submit=210),
    ]
    s = Snapshot(p, s.cluster, s.running, (*s.pending, *late))
    second = Frame(s, Engine().run_cycle(s, 300), {OUT: "XID 79 (GPU fell off the bus)"})
    return [first, second]


def screenshots(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    board = Board()
    for i, frame in enumerate(showcase()):
        board.show(frame, datetime(2026, 12, 3, 9, 0, i * 5, tzinfo=UTC).isoformat())
    server = ThreadServer(app(board, Open()), "127.0.0.1", 0, "dashboard")
    server.start()
    base = f"http://127.0.0.1:{server.port}"
    try:
        with chromium(1280, 800) as d:
            for route in ("cluster", "pool/production", "node/training-0", "queues", "pending"):
                render_ms(d, base, route)
                if route == "pending":
                    d.execute_script("document.querySelector('details').open = true")
                    WebDriverWait(d, 30).until(
                        lambda d: d.execute_script(
                            "return document.querySelector('details pre').textContent !== '…'"
                        )
                    )
                out = folder / f"dashboard-{route.replace('/', '-')}.png"
                d.save_screenshot(str(out))
                print(f"wrote {out}")
    finally:
        server.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--pods", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--screenshots", type=Path, default=None)
    args = ap.parse_args()
    if binaries() is None:
        sys.exit("needs Debian's chromium and chromium-driver (apt-get install both)")
    if args.screenshots is not None:
        screenshots(args.screenshots)
    measure(args.nodes, args.pods, args.runs)


if __name__ == "__main__":
    main()
