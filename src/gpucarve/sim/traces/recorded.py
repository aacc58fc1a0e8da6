"""What a cluster did with a workload, carried by a trace line beside the workload itself.

A history (`gpucarve history export`, the scheduler's recorder) is a JSONL trace whose lines
have, besides the workload `simulate --trace` replays, a `recorded` object:

    "recorded": {
      "starts": [120, 4000],            # each time the whole workload ran (its last pod bound)
      "stops": [{"at": 3000, "cause": "Preempted by production/serve"}],
      "endedAt": 7600,                  # absent while it runs or waits
      "outcome": "Succeeded",           # Succeeded | Failed | Deleted | Running | Pending
      "nodes": ["gpu-a-0", "gpu-a-1"],  # where its last run's pods were
      "scheduler": "gpucarve",          # who bound it (the pods' schedulerName)
      "origin": 1796000000,             # Unix seconds of time 0 (export sets it)
      "wouldStart": 100                 # when a shadow gpucarve would have started it
    }

Times are seconds on the trace's clock (the one `submitTime` counts on). The replay compares a
simulated start with `starts[0]`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

OUTCOMES = ("Succeeded", "Failed", "Deleted", "Running", "Pending")
MAX_EVENTS = 10_000  # starts or stops of one workload: a record past it is not a history
MAX_TIME = 10**12
KEYS = ("starts", "stops", "endedAt", "outcome", "nodes", "scheduler", "origin", "wouldStart")


@dataclass(frozen=True)
class Stop:
    at: int
    cause: str


@dataclass(frozen=True)
class Recorded:
    starts: tuple[int, ...] = ()
    stops: tuple[Stop, ...] = ()
    ended_at: int | None = None
    outcome: str = "Pending"
    nodes: tuple[str, ...] = ()
    scheduler: str = ""
    origin: int | None = None
    would_start: int | None = None  # a shadow's first decision to start it (`--shadow`)

    def as_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"starts": list(self.starts), "outcome": self.outcome}
        if self.stops:
            doc["stops"] = [{"at": s.at, "cause": s.cause} for s in self.stops]
        if self.ended_at is not None:
            doc["endedAt"] = self.ended_at
        if self.nodes:
            doc["nodes"] = list(self.nodes)
        if self.scheduler:
            doc["scheduler"] = self.scheduler
        if self.origin is not None:
            doc["origin"] = self.origin
        if self.would_start is not None:
            doc["wouldStart"] = self.would_start
        return doc

    def shifted(self, by: int, origin: int) -> Recorded:
        """The same facts on a clock that starts `by` seconds later (Unix second `origin`)."""
        return Recorded(
            tuple(t - by for t in self.starts),
            tuple(Stop(s.at - by, s.cause) for s in self.stops),
            None if self.ended_at is None else self.ended_at - by,
            self.outcome,
            self.nodes,
            self.scheduler,
            origin,
            None if self.would_start is None else self.would_start - by,
        )


def _time(raw: object, what: str) -> int:
    if not isinstance(raw, int) or isinstance(raw, bool) or not -MAX_TIME <= raw <= MAX_TIME:
        raise ValueError(f"recorded.{what} is {str(raw)[:24]!r}, not a whole number of seconds")
    return raw


def _text(raw: object, what: str) -> str:
    if not isinstance(raw, str) or len(raw) > 1024:
        raise ValueError(f"recorded.{what} is not a string of at most 1024 characters")
    return raw


def _list(raw: object, what: str) -> list[Any]:
    if raw is None:
        return []
    if not isinstance(raw, list) or len(raw) > MAX_EVENTS:
        raise ValueError(f"recorded.{what} is not a list of at most {MAX_EVENTS} entries")
    return raw


def _stop(raw: object) -> Stop:
    if not isinstance(raw, Mapping) or set(raw) - {"at", "cause"}:
        raise ValueError("recorded.stops holds an entry that is not {at, cause}")
    return Stop(_time(raw.get("at"), "stops[].at"), _text(raw.get("cause", ""), "stops[].cause"))


def parse_recorded(raw: object) -> Recorded:
    """The `recorded` object of a trace line; ValueError says which field is wrong."""
    if not isinstance(raw, Mapping):
        raise ValueError("recorded is not an object")
    unknown = sorted(str(k) for k in raw if k not in KEYS)
    if unknown:
        raise ValueError(
            f"recorded has unknown fields {', '.join(unknown)} (known: {', '.join(KEYS)})"
        )
    outcome = raw.get("outcome", "Pending")
    if outcome not in OUTCOMES:
        raise ValueError(
            f"recorded.outcome is {str(outcome)[:24]!r}, not one of {', '.join(OUTCOMES)}"
        )
    ended = raw.get("endedAt")
    origin = raw.get("origin")
    would = raw.get("wouldStart")
    return Recorded(
        tuple(_time(t, "starts[]") for t in _list(raw.get("starts"), "starts")),
        tuple(_stop(s) for s in _list(raw.get("stops"), "stops")),
        None if ended is None else _time(ended, "endedAt"),
        str(outcome),
        tuple(_text(n, "nodes[]") for n in _list(raw.get("nodes"), "nodes")),
        _text(raw.get("scheduler", ""), "scheduler"),
        None if origin is None else _time(origin, "origin"),
        None if would is None else _time(would, "wouldStart"),
    )
