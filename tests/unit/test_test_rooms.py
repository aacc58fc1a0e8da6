"""The unit tests mirror the rooms: each folder of tests/unit is a room (or sub-room) of the
package, so a test of `gpucarve/webhook/admission.py` is found in tests/unit/webhook/; only
the house's own checks (import cycles, layering, the shipped chart files) sit at the top."""

from __future__ import annotations

from pathlib import Path

import gpucarve

UNIT = Path(__file__).resolve().parent
SRC = Path(gpucarve.__file__).resolve().parent
HOUSE = {"test_import_cycles.py", "test_layering.py", "test_chart_files.py",
         "test_fault_invariants.py", "test_test_rooms.py", "test_architecture_doc.py"}  # fmt: skip


def test_every_folder_of_the_unit_tests_is_a_room_of_the_package() -> None:
    folders = [p.relative_to(UNIT) for p in UNIT.rglob("*") if p.is_dir()]
    folders = [f for f in folders if "__pycache__" not in f.parts]
    assert folders, "no rooms"
    assert [str(f) for f in folders if not (SRC / f).is_dir()] == []


def test_only_the_house_checks_sit_at_the_top() -> None:
    assert {p.name for p in UNIT.glob("test_*.py")} <= HOUSE
