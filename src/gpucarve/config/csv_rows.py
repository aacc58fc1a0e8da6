"""CSV files as line-numbered rows, read the same way by every CSV reader.

A header that lacks a required column, or names one the reader does not know, is refused
at once; a row with fewer or more cells than the header is marked with its problem instead
of being read as a row with empty (or lost) cells: a truncated row must not become a
different job. The caller decides whether a marked row stops the load or is skipped.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass

from gpucarve.config.textfile import TRACE_MAX_BYTES, read_text
from gpucarve.core.problems import InvalidInput, Problem


@dataclass(frozen=True)
class CsvRow:
    line: int
    cells: dict[str, str]
    problem: Problem | None = None  # the row's shape is wrong; `cells` are not to be used

    def get(self, key: str) -> str:
        return (self.cells.get(key) or "").strip()


def row_problem(line: int, message: str, fix: str, code: str = "bad-row") -> Problem:
    return Problem((), code, message, fix, line=line)


def _header_problem(message: str, fix: str) -> Problem:
    return Problem((), "bad-header", message, fix, line=1)


def read_csv(
    path: str,
    what: str,
    required: Sequence[str],
    known: Sequence[str] | None = None,
    max_bytes: int = TRACE_MAX_BYTES,
) -> tuple[list[str], list[CsvRow]]:
    """(header, rows) of a CSV file. `known`: every column allowed (None: any)."""
    source = str(path)
    text = read_text(path, what, max_bytes)
    reader = csv.reader(io.StringIO(text, newline=""))
    rows: list[CsvRow] = []
    header: list[str] | None = None
    line = 1
    try:
        for cells in reader:
            start, line = line, reader.line_num + 1
            if not cells:
                continue
            if header is None:
                header = [c.strip() for c in cells]
                continue
            if len(cells) != len(header):
                n = len(cells)
                problem = row_problem(
                    start,
                    f"{n} cell{'s' if n != 1 else ''} where the header has {len(header)}",
                    "give every row one cell per column (empty cells are written as ,,)",
                    "bad-row-shape",
                )
                rows.append(CsvRow(start, {}, problem))
                continue
            rows.append(CsvRow(start, dict(zip(header, cells, strict=True))))
    except csv.Error as exc:  # e.g. a cell longer than the csv module's field limit
        raise InvalidInput(
            source,
            [row_problem(line, f"line {line}: unreadable CSV: {exc}", "fix the row", "bad-csv")],
        ) from None
    if header is None:
        raise InvalidInput(
            source, [_header_problem("the file is empty", "columns: " + ",".join(required))]
        )
    missing = [c for c in required if c not in header]
    if missing:
        raise InvalidInput(
            source,
            [
                _header_problem(
                    f"the header lacks {', '.join(missing)}",
                    "columns: " + ",".join(known or required),
                )
            ],
        )
    if known is not None:
        unknown = [c for c in header if c not in known]
        if unknown:
            raise InvalidInput(
                source,
                [
                    _header_problem(
                        f"unknown column(s) {', '.join(unknown)}", "columns: " + ",".join(known)
                    )
                ],
            )
    dupes = sorted({c for c in header if header.count(c) > 1})
    if dupes:
        raise InvalidInput(
            source,
            [_header_problem(f"column(s) {', '.join(dupes)} appear twice", "keep one of each")],
        )
    return header, rows
