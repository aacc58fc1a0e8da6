"""Reading the Alibaba GPU-sharing trace's CSV files (node list, pod list) row by row.

A row that cannot be used is an error naming its line, or is skipped and counted when the
caller asks for lenient reading. See `gpucarve.sim.traces.alibaba` for what the rows become.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from gpucarve.config.csv_rows import CsvRow, read_csv
from gpucarve.core.problems import InvalidInput, Problem
from gpucarve.core.quantity import whole_number

MILLI = 1000
NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")


@dataclass(frozen=True, slots=True)
class TraceNode:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str


@dataclass(frozen=True, slots=True)
class TracePod:
    name: str
    line: int
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    gpu_spec: tuple[str, ...]
    qos: str
    creation: int
    duration: int


# The trace's largest node has 96 CPUs and 8 GPUs; far above that is a broken row.
MAX_CELL = 10**12
MAX_GPUS_PER_NODE = 16


class _Rows:
    """Line-numbered CSV rows with one error policy (raise, or skip and count)."""

    def __init__(self, path: Path, required: tuple[str, ...], lenient: bool) -> None:
        self.source = str(path)
        self.lenient = lenient
        self.skipped = 0
        self.problems: list[Problem] = []
        self.header, self.rows = read_csv(self.source, "the trace's CSV", required)

    def good(self) -> Iterator[CsvRow]:
        """The rows whose shape is right; the others are refused or skipped and counted."""
        rows, self.rows = self.rows, []  # read once: a large trace's rows go as they are used
        for row in rows:
            if row.problem is None:
                yield row
            else:
                self.bad(row.line, row.problem.message, row.problem.fix)

    def bad(self, line: int, message: str, fix: str) -> None:
        problem = Problem((), "bad-row", message, fix, line=line)
        if not self.lenient:
            raise InvalidInput(self.source, [problem])
        self.skipped += 1
        self.problems.append(problem)


def _whole(row: CsvRow, key: str) -> int:
    return whole_number(row.get(key), key, MAX_CELL)


def read_nodes(path: str | Path, lenient: bool = False) -> tuple[list[TraceNode], _Rows]:
    rows = _Rows(Path(path), NODE_COLUMNS, lenient)
    out: list[TraceNode] = []
    seen: set[str] = set()
    for row in rows.good():
        line = row.line
        try:
            cpu, mem, gpus = (_whole(row, k) for k in ("cpu_milli", "memory_mib", "gpu"))
        except ValueError as exc:
            rows.bad(line, str(exc), "write a whole number")
            continue
        name, model = row.get("sn"), row.get("model")
        if not name or name in seen:
            rows.bad(line, f"node name {name!r} is empty or repeated", "give each node a name")
            continue
        if gpus == 0:
            continue  # a CPU-only node: no GPU pool to model
        if gpus > MAX_GPUS_PER_NODE:
            rows.bad(
                line,
                f"node {name}: {gpus} GPUs; no server holds more than {MAX_GPUS_PER_NODE}",
                "fix the gpu cell",
            )
            continue
        if not model or cpu < 1000 or mem < 1024:
            rows.bad(
                line,
                f"node {name}: a GPU node needs a model, ≥ 1 CPU and ≥ 1 GiB",
                "fill in model, cpu_milli and memory_mib",
            )
            continue
        seen.add(name)
        out.append(TraceNode(name, cpu, mem, gpus, model))
    return out, rows


def read_pods(path: str | Path, lenient: bool = False) -> tuple[list[TracePod], _Rows]:
    rows = _Rows(Path(path), POD_COLUMNS, lenient)
    has_times = "creation_time" in rows.header
    out: list[TracePod] = []
    seen: set[str] = set()
    for row in rows.good():
        line = row.line
        name = row.get("name")
        try:
            cpu, mem, n, m = (
                _whole(row, k) for k in ("cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
            )
            created = _whole(row, "creation_time") if has_times else 0
            deleted = _whole(row, "deletion_time") if has_times else None
            started = _whole(row, "scheduled_time") if row.get("scheduled_time") else created
        except ValueError as exc:
            rows.bad(line, f"pod {name or '?'}: {exc}", "write a whole number")
            continue
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", name) or name in seen:
            rows.bad(line, f"pod name {name!r} is empty, repeated or not a DNS name", "rename it")
            continue
        if m > MILLI or (n > 1 and m != MILLI) or (n > 0 and m == 0) or (n == 0 and m > 0):
            rows.bad(
                line,
                f"pod {name}: num_gpu {n} with gpu_milli {m} is not a valid request",
                "a share is num_gpu 1 with gpu_milli 1..999; k whole GPUs have gpu_milli 1000",
            )
            continue
        if deleted is None:
            rows.bad(line, f"pod {name}: no deletion_time", "the pod list needs its times")
            continue
        if deleted < started:
            rows.bad(line, f"pod {name}: deleted before it started", "check the times")
            continue
        seen.add(name)
        spec = tuple(sorted(x for x in row.get("gpu_spec").split("|") if x))
        qos = row.get("qos")
        out.append(TracePod(name, line, cpu, mem, n, m, spec, qos, created, deleted - started))
    return out, rows
