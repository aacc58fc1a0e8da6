"""What each GPU is doing, as the DCGM exporter measures it, read from a Prometheus that scrapes
the exporter (`--gpu-metrics-url`): utilisation (`DCGM_FI_DEV_GPU_UTIL`, %) and framebuffer
memory (`DCGM_FI_DEV_FB_USED`, `DCGM_FI_DEV_FB_FREE`, MiB), by node and GPU index.

The dashboard shows allocation from the scheduler's own cycle; this is the other half, how much
of what is held is used. One instant query per refresh (`ttl_s`), asked when a page wants it and
never from the scheduler's loop: a slow or absent Prometheus costs a page its figures, never a
cycle. A series names its node by the label a scrape configuration gives it (`node`,
`kubernetes_node`) or the exporter's own (`hostname`, or `Hostname` before 4.5.3-4.8.2, which is
the node's name where the exporter runs with NODE_NAME, as the GPU Operator runs it). MIG
instances' series (`GPU_I_ID`) add their memory to their GPU; their utilisation is not
attributed per instance (DCGM on Ampere), so a MIG GPU's comes from its whole-GPU series only.
"""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

UTIL, FB_USED, FB_FREE = "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE"
QUERY = '{__name__=~"' + "|".join((UTIL, FB_USED, FB_FREE)) + '"}'
NODE_LABELS = ("node", "kubernetes_node", "hostname", "Hostname")
MAX_BODY = 32 << 20  # a query's answer read at most: a huge cluster's three series fit

Fetch = Callable[[str, float], bytes]  # url, timeout -> body


@dataclass(frozen=True, slots=True)
class GpuUse:
    util_percent: float | None
    memory_used_mib: float | None
    memory_total_mib: float | None

    def as_json(self) -> dict[str, float]:
        out: dict[str, float] = {}
        if self.util_percent is not None:
            out["utilPercent"] = round(self.util_percent, 1)
        if self.memory_used_mib is not None:
            out["memoryUsedMiB"] = round(self.memory_used_mib)
        if self.memory_total_mib is not None:
            out["memoryTotalMiB"] = round(self.memory_total_mib)
        return out


Readings = Mapping[tuple[str, int], GpuUse]  # (node, GPU index) -> what it does


class Unreadable(ValueError):
    pass


def _node_of(labels: Mapping[str, str]) -> str | None:
    return next((labels[k] for k in NODE_LABELS if labels.get(k)), None)


def parse(answer: Mapping[str, Any]) -> dict[tuple[str, int], GpuUse]:
    """A Prometheus instant query's answer (`/api/v1/query`, a vector) of the three series, by
    (node, GPU index). A series without a node or a GPU index is left out."""
    if not isinstance(answer, Mapping):
        raise Unreadable("not a Prometheus answer (a JSON object with status and data)")
    if answer.get("status") != "success":
        raise Unreadable(f"Prometheus answered {answer.get('status')!r}: {answer.get('error')}")
    data = answer.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "vector":
        raise Unreadable("not an instant vector (the query is an instant query)")
    util: dict[tuple[str, int], float] = {}
    used: dict[tuple[str, int], float] = {}
    free: dict[tuple[str, int], float] = {}
    result = data.get("result") or []
    for series in result if isinstance(result, list) else []:
        labels = series.get("metric") if isinstance(series, dict) else None
        if not isinstance(labels, dict):
            continue
        node, gpu = _node_of(labels), labels.get("gpu")
        try:
            key = (str(node), int(gpu)) if node is not None and gpu is not None else None
            value = float(series["value"][1])
        except (KeyError, IndexError, TypeError, ValueError):
            continue
        if key is None or value != value:  # no place for it, or NaN
            continue
        name, mig = labels.get("__name__"), "GPU_I_ID" in labels
        if name == UTIL and not mig:
            util[key] = value
        elif name in (FB_USED, FB_FREE):
            into = used if name == FB_USED else free
            into[key] = into.get(key, 0.0) + value
    out = {}
    for key in sorted({*util, *used, *free}):
        u, f = used.get(key), free.get(key)
        total = u + f if u is not None and f is not None else None
        out[key] = GpuUse(util.get(key), u, total)
    return out


def _fetch(url: str, timeout: float) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        body: bytes = r.read(MAX_BODY + 1)
    if len(body) > MAX_BODY:
        raise Unreadable(f"the answer passed {MAX_BODY >> 20} MiB")
    return body


class PrometheusGpuUse:
    """Readings from the Prometheus at `url`, asked again at most every `ttl_s`."""

    def __init__(
        self,
        url: str,
        ttl_s: float = 15.0,
        timeout_s: float = 3.0,
        fetch: Fetch = _fetch,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = url.rstrip("/")
        self.ttl_s, self.timeout_s = ttl_s, timeout_s
        self._fetch, self._clock = fetch, clock
        self._last: tuple[float, dict[tuple[str, int], GpuUse], str | None] | None = None

    def read(self) -> tuple[Readings, str | None]:
        """The readings, and why there are none when Prometheus did not answer as expected
        (the last good readings are not shown as current)."""
        now = self._clock()
        if self._last is not None and now - self._last[0] < self.ttl_s:
            return self._last[1], self._last[2]
        query = urllib.parse.urlencode({"query": QUERY})
        try:
            answer = json.loads(self._fetch(f"{self.url}/api/v1/query?{query}", self.timeout_s))
            readings, error = parse(answer), None
        except (OSError, ValueError, Unreadable) as exc:
            readings, error = {}, f"GPU metrics from {self.url} unreadable: {exc}"
        self._last = (now, readings, error)
        return readings, error
