"""Workload traces from files: gpucarve's own JSONL and CSV formats.

JSONL: one workload per line, the document `gpucarve plan` reads (name, namespace, queue,
priorityClass, submitTime, duration, topology, podSets) plus an optional `utilisation` (percent
of a GPU the job keeps busy alone, for the slow-down model).

CSV: one workload per row, one pod set, with the header

    name,namespace,queue,priority_class,submit_time,duration,pods,min_pods,gpus,mig_profile,
    shared,gpu_fraction,gpu_memory,cpu,memory,topology,utilisation

where empty cells mean "not set" and exactly one of gpus / mig_profile / shared /
gpu_fraction+gpu_memory (or none, for a CPU-only pod) describes the GPU request.

A bad row is an error naming its line; with `lenient=True` it is skipped and counted instead.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpucarve.config.workload_spec import build_workload
from gpucarve.core.policy import Policy
from gpucarve.core.problems import InvalidInput, Problem
from gpucarve.core.workload import Workload

CSV_COLUMNS = (
    "name", "namespace", "queue", "priority_class", "submit_time", "duration", "pods", "min_pods",
    "gpus", "mig_profile", "shared", "gpu_fraction", "gpu_memory", "cpu", "memory", "topology",
    "utilisation",
)  # fmt: skip


@dataclass
class LoadedTrace:
    workloads: list[Workload] = field(default_factory=list)
    utilisation: dict[str, float] = field(default_factory=dict)
    skipped: int = 0
    problems: list[Problem] = field(default_factory=list)  # of skipped rows, in lenient mode


def _row_problem(line: int, message: str, fix: str, code: str = "bad-row") -> Problem:
    return Problem((f"line {line}",), code, message, fix, line=line)


def _int(row: dict[str, str], key: str) -> int | None:
    value = (row.get(key) or "").strip()
    if not value:
        return None
    if not value.lstrip("-").isdigit():
        raise ValueError(f"{key} is {value!r}, not a whole number")
    return int(value)


def csv_row_to_doc(row: dict[str, str]) -> tuple[dict[str, Any], float | None]:
    """A CSV row as a workload document (raises ValueError for malformed cells)."""
    limits: dict[str, int] = {}
    annotations: dict[str, str] = {}
    if (gpus := _int(row, "gpus")) is not None:
        limits["nvidia.com/gpu"] = gpus
    if profile := (row.get("mig_profile") or "").strip():
        limits[f"nvidia.com/mig-{profile.replace('+', '.')}"] = 1
    if (shared := _int(row, "shared")) is not None:
        limits["nvidia.com/gpu.shared"] = shared
    if (fraction := _int(row, "gpu_fraction")) is not None:
        annotations["gpucarve.io/gpu-fraction"] = str(fraction)
    if (memory := _int(row, "gpu_memory")) is not None:
        annotations["gpucarve.io/gpu-memory"] = str(memory)
    requests: dict[str, str] = {}
    for key in ("cpu", "memory"):
        if value := (row.get(key) or "").strip():
            requests[key] = value
    pod_set: dict[str, Any] = {
        "count": _int(row, "pods") or 1,
        "resources": {"limits": limits, "requests": requests},
        "annotations": annotations,
    }
    if (min_pods := _int(row, "min_pods")) is not None:
        pod_set["minCount"] = min_pods
    doc: dict[str, Any] = {
        "name": (row.get("name") or "").strip(),
        "namespace": (row.get("namespace") or "").strip(),
        "submitTime": _int(row, "submit_time") or 0,
        "podSets": [pod_set],
    }
    for key, target in (
        ("queue", "queue"),
        ("priority_class", "priorityClass"),
        ("topology", "topology"),
    ):
        if value := (row.get(key) or "").strip():
            doc[target] = value
    if (duration := _int(row, "duration")) is not None:
        doc["duration"] = duration
    util_raw = (row.get("utilisation") or "").strip()
    util = float(util_raw) if util_raw else None
    return doc, util


def _accept(
    out: LoadedTrace, doc: Any, util: Any, line: int, policy: Policy, source: str, lenient: bool
) -> None:
    w, problems = build_workload(doc, policy, (f"line {line}",))
    if w is not None and w.duration is None:
        problems = [_row_problem(line, "the workload has no duration", "add `duration` (seconds)")]
        w = None
    if w is not None and w.id in out.utilisation:
        problems = [_row_problem(line, f"workload {w.id} appears twice", "give it a unique name")]
        w = None
    if w is None:
        lined = [Problem(p.path, p.code, p.message, p.fix, p.severity, line) for p in problems]
        if not lenient:
            raise InvalidInput(source, lined)
        out.skipped += 1
        out.problems.extend(lined)
        return
    out.workloads.append(w)
    out.utilisation[w.id] = float(util) if isinstance(util, int | float) else 60.0


def load_trace(path: str | Path, policy: Policy, lenient: bool = False) -> LoadedTrace:
    p = Path(path)
    source = str(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidInput(
            source, [Problem((), "file-not-found", "no such file", "check the path")]
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(
            source,
            [Problem((), "file-unreadable", f"cannot read: {exc}", "pass a UTF-8 trace file")],
        ) from None
    out = LoadedTrace()
    if p.suffix.lower() == ".csv":
        reader = csv.DictReader(io.StringIO(text))
        missing = [
            c for c in ("name", "namespace", "duration") if c not in (reader.fieldnames or [])
        ]
        if missing:
            raise InvalidInput(
                source,
                [
                    Problem(
                        (),
                        "bad-header",
                        f"the CSV header lacks {', '.join(missing)}",
                        "columns: " + ",".join(CSV_COLUMNS),
                        line=1,
                    )
                ],
            )
        unknown = [c for c in reader.fieldnames or [] if c not in CSV_COLUMNS]
        if unknown:
            raise InvalidInput(
                source,
                [
                    Problem(
                        (),
                        "bad-header",
                        f"unknown column(s) {', '.join(unknown)}",
                        "columns: " + ",".join(CSV_COLUMNS),
                        line=1,
                    )
                ],
            )
        for row in reader:
            line = reader.line_num
            try:
                doc, util = csv_row_to_doc(row)
            except ValueError as exc:
                problem = _row_problem(line, str(exc), "fix the cell")
                if not lenient:
                    raise InvalidInput(source, [problem]) from None
                out.skipped += 1
                out.problems.append(problem)
                continue
            _accept(out, doc, util, line, policy, source, lenient)
    else:
        for line, raw in enumerate(text.splitlines(), 1):
            if not raw.strip():
                continue
            try:
                doc = json.loads(raw)
            except json.JSONDecodeError as exc:
                problem = _row_problem(
                    line, f"not JSON: {exc.msg} (column {exc.colno})", "one JSON object per line"
                )
                if not lenient:
                    raise InvalidInput(source, [problem]) from None
                out.skipped += 1
                out.problems.append(problem)
                continue
            util = doc.pop("utilisation", None) if isinstance(doc, dict) else None
            _accept(out, doc, util, line, policy, source, lenient)
    if not out.workloads:
        raise InvalidInput(
            source,
            [Problem((), "empty-trace", "no usable workload in the trace", "check the file")],
        )
    out.workloads.sort(key=lambda w: (w.submit_time, w.id))
    return out
