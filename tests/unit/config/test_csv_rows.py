"""CSV rows as every trace reader gets them (config/csv_rows.py): cells by column, shapes
checked, line endings of any editor, and a large trace's rows kept small."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpucarve.config.csv_rows import read_csv


@pytest.mark.parametrize("ending", ["\n", "\r\n", "\r"])
def test_rows_are_read_whatever_the_line_ending(tmp_path: Path, ending: str) -> None:
    path = tmp_path / "t.csv"
    path.write_bytes(ending.join(["name,gpu", "a,1", '"b, quoted",2', ""]).encode())
    header, rows = read_csv(str(path), "a trace", ["name"])
    assert header == ["name", "gpu"]
    assert [(r.line, r.get("name"), r.get("gpu")) for r in rows] == [
        (2, "a", "1"), (3, "b, quoted", "2")]  # fmt: skip
    assert rows[0].cells == {"name": "a", "gpu": "1"}
    assert rows[0].get("absent") == ""


def test_a_quoted_cell_may_span_lines(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text('name,note\na,"two\nlines"\nb,x\n')
    _, rows = read_csv(str(path), "a trace", ["name"])
    assert [(r.line, r.get("note")) for r in rows] == [(2, "two\nlines"), (4, "x")]


def test_short_cells_are_one_string_for_every_row(tmp_path: Path) -> None:
    """A trace repeats its small values on every row: each is held once, so a 50 MB trace's
    rows take a few hundred MB, not gigabytes."""
    path = tmp_path / "t.csv"
    path.write_text("name,gpu,qos\n" + "".join(f"pod-{i},1000,LS\n" for i in range(3)))
    _, rows = read_csv(str(path), "a trace", ["name"])
    assert len({id(r.values[1]) for r in rows}) == 1
    assert len({id(r.values[2]) for r in rows}) == 1
    assert rows[0].columns is rows[2].columns


def test_a_row_of_the_wrong_shape_is_marked_not_read(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("name,gpu\na\n")
    _, (row,) = read_csv(str(path), "a trace", ["name"])
    assert row.problem is not None and row.problem.code == "bad-row-shape"
    assert row.get("name") == ""
