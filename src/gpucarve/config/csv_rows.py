"""CSV files as line-numbered rows, read the same way by every CSV reader.

A header that lacks a required column, or names one the reader does not know, is refused
at once; a row with fewer or more cells than the header is marked with its problem instead
of being read as a row with empty (or lost) cells: a truncated row must not become a
different job. The caller decides whether a marked row stops the load or is skipped.
"""

from __future__ import annotations

import csv
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from gpucarve.config.textfile import TRACE_MAX_BYTES, read_text
from gpucarve.core.problems import InvalidInput, Problem

# A cell this short is interned: traces repeat small values (counts, flags, "0") on every
# row, and one string each keeps a large trace's rows to a few hundred bytes apiece.
SHARED_CELL_CHARS = 8


@dataclass(frozen=True, slots=True)
class CsvRow:
    line: int
    values: tuple[str, ...]
    columns: Mapping[str, int]  # column -> index into values, one mapping for every row
    problem: Problem | None = None  # the row's shape is wrong; its cells are not to be used

    @property
    def cells(self) -> dict[str, str]:
        return {c: self.values[i] for c, i in self.columns.items()}

    def get(self, key: str) -> str:
        i = self.columns.get(key)
        return "" if i is None else self.values[i].strip()


def _lines(text: str) -> Iterator[str]:
    """The text's lines with their endings, one at a time (no copy of the whole text); lines
    end in \n (or \r\n), or in a lone \r where the file has no \n at all."""
    start, end = 0, len(text)
    sep = "\n" if "\n" in text or "\r" not in text else "\r"
    while start < end:
        stop = text.find(sep, start)
        stop = end if stop < 0 else stop + 1
        yield text[start:stop]
        start = stop


def _shared(cells: list[str]) -> tuple[str, ...]:
    return tuple(sys.intern(c) if len(c) <= SHARED_CELL_CHARS else c for c in cells)


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
    reader = csv.reader(_lines(text))
    rows: list[CsvRow] = []
    header: list[str] | None = None
    columns: dict[str, int] = {}
    line = 1
    try:
        for cells in reader:
            start, line = line, reader.line_num + 1
            if not cells:
                continue
            if header is None:
                header = [c.strip() for c in cells]
                columns = {c: i for i, c in enumerate(header)}
                continue
            if len(cells) != len(header):
                n = len(cells)
                problem = row_problem(
                    start,
                    f"{n} cell{'s' if n != 1 else ''} where the header has {len(header)}",
                    "give every row one cell per column (empty cells are written as ,,)",
                    "bad-row-shape",
                )
                rows.append(CsvRow(start, (), {}, problem))
                continue
            rows.append(CsvRow(start, _shared(cells), columns))
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
