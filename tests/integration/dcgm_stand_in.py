"""A stand-in DCGM exporter (the exporter's metric and label names,
`../shared/reference/sharing-formats.md` §10, values the test sets) and a real Prometheus
scraping it every second, for tests of what reads GPU metrics."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from gpucarve.devcluster.procs import free_ports

MIB = 81559  # an H100's framebuffer, as the example's nodes say


class Exporter:
    """The DCGM exporter's /metrics for the GPUs the test sets."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = ("\n".join(exporter.lines) + "\n").encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def gpus(self, node: str, util: list[int], used: list[int]) -> None:
        lines = []
        for i, (u, m) in enumerate(zip(util, used, strict=True)):
            labels = (f'gpu="{i}",UUID="GPU-{i:04d}",device="nvidia{i}",'
                      f'modelName="NVIDIA H100 80GB HBM3",Hostname="{node}"')  # fmt: skip
            lines += [f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} {u}",
                      f"DCGM_FI_DEV_FB_USED{{{labels}}} {m}",
                      f"DCGM_FI_DEV_FB_FREE{{{labels}}} {MIB - m}"]  # fmt: skip
        # a MIG instance on GPU 7: its memory is its GPU's, its utilisation no one's
        mig = f'gpu="7",GPU_I_ID="1",GPU_I_PROFILE="1g.10gb",Hostname="{node}"'
        lines += [f"DCGM_FI_DEV_GPU_UTIL{{{mig}}} 99", f"DCGM_FI_DEV_FB_USED{{{mig}}} 100"]
        self.lines = lines

    def stop(self) -> None:
        self.server.shutdown()


@contextmanager
def prometheus(bins: Path, work: Path, target: int) -> Iterator[str]:
    port = free_ports(1)[0]
    config = work / "prometheus.yaml"
    config.write_text(
        "global: {scrape_interval: 1s}\nscrape_configs:\n  - job_name: dcgm\n"
        f'    static_configs: [{{targets: ["127.0.0.1:{target}"]}}]\n'
    )
    with (work / "prometheus.log").open("wb") as log:
        proc = subprocess.Popen(
            [str(bins / "prometheus"), f"--config.file={config}",
             f"--storage.tsdb.path={work / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            proc.terminate()
            proc.wait(30)
