"""A durable, bounded history: JSONL trace lines appended to files in one folder, a new file
once the current one passes `max_bytes` or `rotate_s` of age, the oldest dropped once there are
more than `max_files` or once everything in them is older than `max_age_s`. At most
`max_files × max_bytes` (plus one line) is ever on disk.

Files are named `history-<first second>.jsonl`: a file holds nothing newer than the next
file's first second, which is how age is judged without reading it. A line cut short by a
crash is skipped when read, never an error."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PREFIX, SUFFIX = "history-", ".jsonl"


@dataclass(frozen=True)
class Bounds:
    max_bytes: int = 16 * 1024 * 1024
    max_files: int = 16
    rotate_s: int = 86_400
    max_age_s: int = 90 * 86_400


def history_bounds(max_mib: int, max_days: int, files: int = 16) -> Bounds:
    """Bounds of at most `max_mib` on disk in `files` files, none older than `max_days`
    (a file rotates once it fills or covers its share of the days, so that the files together
    span `max_days`)."""
    age = max_days * 86_400
    return Bounds(max(1, max_mib * 1024 * 1024 // files), files, max(3600, age // (files - 1)), age)


def _first_second(path: Path) -> int | None:
    stem = path.name[len(PREFIX) : -len(SUFFIX)]
    head = stem.split("-", 1)[0]
    return int(head) if head.isdigit() else None


class HistoryStore:
    def __init__(self, folder: Path, bounds: Bounds = Bounds()) -> None:
        self.folder = folder
        self.bounds = bounds

    def files(self) -> list[Path]:
        """The history's files, oldest first."""
        if not self.folder.is_dir():
            return []
        found = [
            (first, p.name, p)
            for p in self.folder.iterdir()
            if p.name.startswith(PREFIX)
            and p.name.endswith(SUFFIX)
            and (first := _first_second(p)) is not None
        ]
        return [p for _, _, p in sorted(found)]

    def append(self, line: Mapping[str, Any], now: int) -> None:
        """Add one line (a workload that ended), rotating and pruning first where due."""
        self.append_all([line], now)

    def append_all(self, lines: Sequence[Mapping[str, Any]], now: int) -> None:
        """Add lines with one write and one sync (a cycle's workloads that ended)."""
        if not lines:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        text = "".join(json.dumps(x, sort_keys=True, separators=(",", ":")) + "\n" for x in lines)
        files = self.files()
        current = files[-1] if files else None
        if current is None or self._full(current, now):
            current = self._new_file(files, now)
            files.append(current)
        with current.open("a", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        self._prune(files, now)

    def _full(self, path: Path, now: int) -> bool:
        first = _first_second(path) or 0
        return path.stat().st_size >= self.bounds.max_bytes or now - first >= self.bounds.rotate_s

    def _new_file(self, files: list[Path], now: int) -> Path:
        # a second already named (two rotations in one second) gets a sequence after it
        names = {p.name for p in files}
        name, seq = f"{PREFIX}{now}{SUFFIX}", 1
        while name in names:
            name, seq = f"{PREFIX}{now}-{seq}{SUFFIX}", seq + 1
        return self.folder / name

    def _prune(self, files: list[Path], now: int) -> None:
        while len(files) > self.bounds.max_files:
            files.pop(0).unlink(missing_ok=True)
        # a file is past the age once the next one starts before the cut-off
        while len(files) > 1 and (_first_second(files[1]) or 0) < now - self.bounds.max_age_s:
            files.pop(0).unlink(missing_ok=True)

    def lines(self, since: int | None = None) -> Iterator[dict[str, Any]]:
        """Every whole line, oldest first; with `since`, those of workloads that ended then or
        later (or never ended)."""
        for path in self.files():
            with path.open(encoding="utf-8", errors="replace") as f:
                for raw in f:
                    line = _parsed(raw)
                    if line is not None and (since is None or _ended(line, since)):
                        yield line


def _parsed(raw: str) -> dict[str, Any] | None:
    if not raw.endswith("\n"):
        return None  # cut short by a crash
    try:
        found = json.loads(raw)
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def _ended(line: Mapping[str, Any], since: int) -> bool:
    recorded = line.get("recorded")
    ended = recorded.get("endedAt") if isinstance(recorded, Mapping) else None
    return not isinstance(ended, int) or ended >= since
