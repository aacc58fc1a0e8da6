"""Workload traces from files: gpucarve's own JSONL and CSV formats.

JSONL: one workload per line, the document `gpucarve plan` reads (name, namespace, queue,
priorityClass, submitTime, duration, topology, podSets) plus an optional `utilisation` (percent
of a GPU the job keeps busy alone, for the slow-down model) and an optional `idleAfter` (seconds
into each run after which it holds its GPUs idle to its end: the simulator's idle model; CSV
column `idle_after`).

CSV: one workload per row, one pod set, with the header

    name,namespace,queue,priority_class,submit_time,duration,pods,min_pods,gpus,mig_profile,
    shared,gpu_fraction,gpu_memory,cpu,memory,topology,utilisation,idle_after

where empty cells mean "not set" and exactly one of gpus / mig_profile / shared /
gpu_fraction+gpu_memory (or none, for a CPU-only pod) describes the GPU request.

A bad row is an error naming its line; with `lenient=True` it is skipped and counted instead.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpucarve.config.csv_rows import read_csv, row_problem
from gpucarve.config.textfile import TRACE_MAX_BYTES, read_text
from gpucarve.config.workload_spec import build_workload
from gpucarve.core.policy import Policy
from gpucarve.core.problems import InvalidInput, Problem
from gpucarve.core.quantity import whole_number
from gpucarve.core.vocabulary import FRACTION_ANNOTATION, MEMORY_ANNOTATION
from gpucarve.core.workload import Workload
from gpucarve.sim.traces.recorded import Recorded, parse_recorded

CSV_COLUMNS = (
    "name", "namespace", "queue", "priority_class", "submit_time", "duration", "pods", "min_pods",
    "gpus", "mig_profile", "shared", "gpu_fraction", "gpu_memory", "cpu", "memory", "topology",
    "utilisation", "idle_after",
)  # fmt: skip


DEFAULT_UTILISATION = 60.0  # percent, for a workload whose trace says nothing


@dataclass
class LoadedTrace:
    workloads: list[Workload] = field(default_factory=list)
    utilisation: dict[str, float] = field(default_factory=dict)
    skipped: int = 0
    # what the cluster did with each workload, where the trace is a recorded history
    recorded: dict[str, Recorded] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)  # of skipped rows, in lenient mode
    # seconds into each run after which a workload holds its GPUs idle (SimConfig.idle_after)
    idle_after: dict[str, int] = field(default_factory=dict)


# Bounds that keep arithmetic sane; the workload schema then checks each field's own range.
MAX_CELL_NUMBER = 10**12
MAX_JSONL_LINE = 1024 * 1024
MAX_JSON_DIGITS = 24


def _row_problem(line: int, message: str, fix: str, code: str = "bad-row") -> Problem:
    return row_problem(line, message, fix, code)


def _int(row: dict[str, str], key: str) -> int | None:
    value = (row.get(key) or "").strip()
    if not value:
        return None
    return whole_number(value, key, MAX_CELL_NUMBER)


def utilisation_of(raw: object) -> float | None:
    """A job's GPU utilisation alone, in percent (0-100); ValueError names what is wrong."""
    if raw is None or raw == "":
        return None
    if isinstance(raw, str):
        try:
            value = float(raw.strip())
        except ValueError:
            raise ValueError(f"utilisation is {raw[:24]!r}, not a number") from None
    elif isinstance(raw, int | float) and not isinstance(raw, bool):
        value = float(raw)
    else:
        raise ValueError(f"utilisation is {raw!r}, not a number")
    if not math.isfinite(value) or not 0 <= value <= 100:
        raise ValueError(f"utilisation is {value}, not a percentage 0-100")
    return value


def idle_after_of(raw: object) -> int | None:
    """Seconds into a run after which it holds its GPUs idle; ValueError names what is
    wrong."""
    if raw is None or raw == "":
        return None
    if isinstance(raw, bool) or not isinstance(raw, int | str):
        raise ValueError(f"idle_after is {raw!r}, not a whole number of seconds")
    value = (
        whole_number(raw.strip(), "idle_after", MAX_CELL_NUMBER) if isinstance(raw, str) else raw
    )
    if value < 0:
        raise ValueError(f"idle_after is {value}, not 0 to {MAX_CELL_NUMBER} seconds")
    return value


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
        annotations[FRACTION_ANNOTATION] = str(fraction)
    if (memory := _int(row, "gpu_memory")) is not None:
        annotations[MEMORY_ANNOTATION] = str(memory)
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
    return doc, utilisation_of(row.get("utilisation"))


def _accept(
    out: LoadedTrace,
    doc: Any,
    util: float | None,
    line: int,
    policy: Policy,
    source: str,
    lenient: bool,
    recorded: Recorded | None = None,
    idle_after: int | None = None,
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
    out.utilisation[w.id] = DEFAULT_UTILISATION if util is None else util
    if idle_after is not None:
        out.idle_after[w.id] = idle_after
    if recorded is not None:
        out.recorded[w.id] = recorded


def _skip_or_raise(out: LoadedTrace, problem: Problem, source: str, lenient: bool) -> None:
    if not lenient:
        raise InvalidInput(source, [problem])
    out.skipped += 1
    out.problems.append(problem)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_JSON_DIGITS:
        raise ValueError(f"the number {text[:12]}… has more than {MAX_JSON_DIGITS} digits")
    return int(text)


def _json_line(raw: str) -> Any:
    """One JSONL line; ValueError says what is wrong in words a user can act on."""
    if len(raw) > MAX_JSONL_LINE:
        raise ValueError(f"the line is longer than {MAX_JSONL_LINE // 1024} KiB")
    try:
        return json.loads(raw, parse_constant=_refuse_constant, parse_int=_bounded_int)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc.msg} (column {exc.colno})") from None
    except RecursionError:
        raise ValueError("nested too deeply to be a workload") from None


def _load_csv(path: str | Path, policy: Policy, lenient: bool, out: LoadedTrace) -> None:
    source = str(path)
    _, rows = read_csv(
        source, "a gpucarve CSV trace", ("name", "namespace", "duration"), CSV_COLUMNS
    )
    for row in rows:
        if row.problem is not None:
            _skip_or_raise(out, row.problem, source, lenient)
            continue
        try:
            doc, util = csv_row_to_doc(row.cells)
            idle = idle_after_of(row.cells.get("idle_after"))
        except ValueError as exc:
            _skip_or_raise(out, _row_problem(row.line, str(exc), "fix the cell"), source, lenient)
            continue
        _accept(out, doc, util, row.line, policy, source, lenient, idle_after=idle)


def _load_jsonl(path: str | Path, policy: Policy, lenient: bool, out: LoadedTrace) -> None:
    source = str(path)
    text = read_text(path, "a gpucarve JSONL trace", TRACE_MAX_BYTES)
    for line, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            doc = _json_line(raw)
            util = utilisation_of(doc.pop("utilisation", None)) if isinstance(doc, dict) else None
            idle = idle_after_of(doc.pop("idleAfter", None)) if isinstance(doc, dict) else None
            seen = doc.pop("recorded", None) if isinstance(doc, dict) else None
            recorded = None if seen is None else parse_recorded(seen)
        except ValueError as exc:
            fix = (
                "one JSON object per line, utilisation a percentage 0-100, idleAfter whole "
                "seconds, recorded as `gpucarve history export` writes it"
            )
            _skip_or_raise(out, _row_problem(line, str(exc), fix), source, lenient)
            continue
        _accept(out, doc, util, line, policy, source, lenient, recorded, idle)


def load_trace(path: str | Path, policy: Policy, lenient: bool = False) -> LoadedTrace:
    source = str(path)
    out = LoadedTrace()
    if Path(path).suffix.lower() == ".csv":
        _load_csv(path, policy, lenient, out)
    else:
        _load_jsonl(path, policy, lenient, out)
    if not out.workloads:
        if out.problems:
            first = out.problems[0]
            message = (
                f"no usable workload: all {out.skipped} rows were skipped; the first, "
                f"line {first.line}: {first.message}"
            )
            fix = first.fix
        else:
            message, fix = "no workload in the trace", "add one workload per row or line"
        raise InvalidInput(source, [Problem((), "empty-trace", message, fix)])
    out.workloads.sort(key=lambda w: (w.submit_time, w.id))
    return out
