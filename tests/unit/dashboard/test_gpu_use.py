"""Reading what GPUs do from Prometheus's answer (gpu_use): the node and GPU of each series, MIG
instances' memory added to their GPU and their utilisation left out, what cannot be placed left
out, an answer that is not one refused, and a Prometheus asked at most once per refresh."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpucarve.dashboard.gpu_use import GpuUse, PrometheusGpuUse, Unreadable, parse


def _series(name: str, value: str, **labels: str) -> dict[str, Any]:
    return {"metric": {"__name__": name, **labels}, "value": [1700000000.0, value]}


def _answer(*series: dict[str, Any]) -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": "vector", "result": list(series)}}


def test_each_gpu_by_its_node_and_index() -> None:
    got = parse(_answer(
        _series("DCGM_FI_DEV_GPU_UTIL", "37", gpu="0", Hostname="n1"),
        _series("DCGM_FI_DEV_FB_USED", "1000", gpu="0", Hostname="n1"),
        _series("DCGM_FI_DEV_FB_FREE", "3000", gpu="0", Hostname="n1"),
        # a scrape's own node label wins over the exporter's hostname
        _series("DCGM_FI_DEV_GPU_UTIL", "5", gpu="1", node="n2", hostname="exporter-pod"),
    ))  # fmt: skip
    assert got == {
        ("n1", 0): GpuUse(37.0, 1000.0, 4000.0),
        ("n2", 1): GpuUse(5.0, None, None),
    }
    assert got[("n1", 0)].as_json() == {"utilPercent": 37.0, "memoryUsedMiB": 1000,
                                        "memoryTotalMiB": 4000}  # fmt: skip


def test_a_mig_instance_adds_memory_to_its_gpu_and_no_utilisation() -> None:
    got = parse(_answer(
        _series("DCGM_FI_DEV_FB_USED", "100", gpu="2", hostname="n", GPU_I_ID="1"),
        _series("DCGM_FI_DEV_FB_USED", "200", gpu="2", hostname="n", GPU_I_ID="2"),
        _series("DCGM_FI_DEV_GPU_UTIL", "99", gpu="2", hostname="n", GPU_I_ID="1"),
    ))  # fmt: skip
    assert got == {("n", 2): GpuUse(None, 300.0, None)}


@pytest.mark.parametrize(
    "series",
    [
        _series("DCGM_FI_DEV_GPU_UTIL", "5", gpu="0"),  # no node
        _series("DCGM_FI_DEV_GPU_UTIL", "5", Hostname="n"),  # no GPU index
        _series("DCGM_FI_DEV_GPU_UTIL", "NaN", gpu="0", Hostname="n"),
        _series("DCGM_FI_DEV_GPU_UTIL", "five", gpu="0", Hostname="n"),
        _series("DCGM_FI_DEV_GPU_UTIL", "5", gpu="x", Hostname="n"),
        {"metric": {"__name__": "DCGM_FI_DEV_GPU_UTIL", "gpu": "0", "Hostname": "n"}},
        "not a series",
        {"metric": ["not", "labels"], "value": [0, "5"]},
    ],
)
def test_a_series_that_cannot_be_placed_is_left_out(series: Any) -> None:
    assert parse(_answer(series)) == {}


@pytest.mark.parametrize(
    "answer",
    [
        {"status": "error", "error": "parse error"},
        {"status": "success", "data": {"resultType": "matrix", "result": []}},
        {"status": "success"},
        ["not", "an", "object"],
    ],
)
def test_an_answer_that_is_not_an_instant_vector_is_refused(answer: Any) -> None:
    with pytest.raises(Unreadable):
        parse(answer)


def test_prometheus_is_asked_once_per_refresh_and_its_failure_said() -> None:
    asked: list[str] = []
    now = [0.0]
    answers: list[bytes | OSError] = [
        json.dumps(_answer(_series("DCGM_FI_DEV_GPU_UTIL", "7", gpu="0", node="n"))).encode(),
        OSError("connection refused"),
    ]

    def fetch(url: str, timeout: float) -> bytes:
        asked.append(url)
        got = answers.pop(0)
        if isinstance(got, OSError):
            raise got
        return got

    use = PrometheusGpuUse("http://prom:9090/", ttl_s=15, fetch=fetch, clock=lambda: now[0])
    readings, error = use.read()
    assert error is None and readings[("n", 0)].util_percent == 7.0
    assert asked[0].startswith("http://prom:9090/api/v1/query?query=")
    now[0] = 10.0
    assert use.read() == (readings, None) and len(asked) == 1  # within the refresh
    now[0] = 16.0
    readings, error = use.read()
    # the last good readings are not shown as current
    assert readings == {} and error is not None and "connection refused" in error
    assert "http://prom:9090" in error and len(asked) == 2


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--gpu-metrics-url", "prometheus:9090", "--dashboard-port", "8090"], "not-a-url"),
        (["--gpu-metrics-url", "http://", "--dashboard-port", "8090"], "not-a-url"),
        (["--gpu-metrics-url", "ftp://prometheus:9090"], "not-a-url"),  # no dashboard: idleness
    ],
)
def test_the_scheduler_refuses_a_gpu_metrics_url_it_cannot_use(args: list[str], says: str) -> None:
    from typer.testing import CliRunner

    from gpucarve.cli.main import app
    from tests.paths import BUILTIN

    policy = str(BUILTIN / "three-teams.yaml")
    r = CliRunner().invoke(app, ["scheduler", "--policy", policy, *args])
    assert r.exit_code == 2 and f"--gpu-metrics-url [{says}]" in r.output and "fix:" in r.output
