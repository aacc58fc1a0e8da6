"""What GPUs do, beside what the scheduler allocated: a real Prometheus scrapes a stand-in DCGM
exporter (the exporter's metric and label names, `../shared/reference/sharing-formats.md` §10,
values the test sets) for the node gpucarve bound research's 8-GPU pod to, and the dashboard
of a scheduler on the real API server (`--gpu-metrics-url`) shows each GPU's utilisation and
memory, research's, and the cluster's, in its API and in headless Chromium; a MIG instance's
series add their memory to their GPU and none of their utilisation."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By

from gpucarve.dashboard.access import Open
from gpucarve.dashboard.gpu_use import PrometheusGpuUse
from gpucarve.dashboard.server import Board, app
from gpucarve.devcluster.stack import ADMIN_USER, LocalStack, find_binaries
from gpucarve.kube.scheduler.health import ThreadServer
from tests.browser import chromium, need_browser, show
from tests.integration.api import Api, wait_for
from tests.integration.dcgm_stand_in import MIB, Exporter, prometheus
from tests.integration.kube_pods import create_pod, node_of, pod, pods_in
from tests.integration.stack_setup import example_policy, populate, scheduling

pytestmark = pytest.mark.integration


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def test_the_dashboard_shows_what_the_gpus_do(tmp_path: Path) -> None:
    need_browser()
    policy_file = example_policy(tmp_path)
    exporter = Exporter()
    with (
        LocalStack(find_binaries(), tmp_path / "stack", policy_file) as stack,
        prometheus(stack.bin_dir, tmp_path, exporter.port) as prom,
    ):
        api = Api(stack.server, stack.tokens[ADMIN_USER])
        populate(stack, api, policy_file, ["research"])
        with scheduling(stack, policy_file) as sched:
            board = Board()
            sched.observers.append(board.observe)
            use = PrometheusGpuUse(prom, ttl_s=0.5)
            server = ThreadServer(app(board, Open(), None, use), "127.0.0.1", 0)
            server.start()
            try:
                create_pod(api, pod("research", "train", "nvidia.com/gpu", 8))
                node = wait_for(lambda: node_of(pods_in(api, "research")["train"]),
                                what="research's pod bound")  # fmt: skip
                util = [10 * i for i in range(8)]  # 0..70: 35 on average
                used = [1024 * i for i in range(8)]
                exporter.gpus(str(node), util, used)
                base = f"http://127.0.0.1:{server.port}"

                def measured() -> dict[str, Any] | None:
                    body = _get(f"{base}/api/nodes/{node}")
                    gpus = body["gpus"]
                    return body if all("use" in g for g in gpus) else None

                body = wait_for(measured, timeout_s=60, what="the GPUs measured")
                assert [g["use"]["utilPercent"] for g in body["gpus"]] == util
                # GPU 7's memory has its MIG instance's 100 MiB too; its 99 % is nobody's
                assert [g["use"]["memoryUsedMiB"] for g in body["gpus"]] == [
                    *used[:7],
                    used[7] + 100,
                ]
                assert body["gpus"][0]["use"]["memoryTotalMiB"] == MIB
                assert body["gpuMetrics"] == {"source": prom}
                team = _get(f"{base}/api/queues")["use"]["research"]
                assert team == {"gpus": 8, "utilPercent": 35.0,
                                "memoryUsedMiB": sum(used) + 100}  # fmt: skip
                whole = _get(f"{base}/api/cluster")["use"]
                assert whole["gpus"] == 8 and whole["utilPercent"] == 35.0
                with chromium() as d:
                    text = show(d, base, f"node/{node}")
                    gpu3 = d.find_element(By.CSS_SELECTOR, f'[data-gpu="{node}/gpu3"] .use')
                    assert gpu3.text == "30 % busy · 3 of 79.6 GiB used"
                    assert "GPU 3\t30\t3\t79.6" in text
                    text = show(d, base, "queues")
                    assert "What its GPUs do (DCGM): 8 GPUs measured, 35 % busy" in text
                    text = show(d, base, "cluster")
                    assert "Measured: 8 GPUs, 35 % busy" in text
            finally:
                server.stop()
                exporter.stop()
