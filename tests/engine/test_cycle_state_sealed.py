"""The cycle's state is split by who writes it (`engine/state.py`): what the cycle decided
(`Decided`), what holds work back (`Holds`) and what it remembers to stay fast (`Memos`; and
across cycles, the engine's `memo.AcrossCycles`), each written only through its own methods.
What they hand out is typed read-only (`Sequence`, `Mapping`), so mypy refuses a write through
it; this test refuses the rest: any engine module but `state.py` that assigns an attribute
reached through a cycle's state or one of its parts, or calls a mutator on what one holds."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import gpucarve
from gpucarve.engine.state import CycleState, Decided, Holds, Memos
from tests.engine.writes import writes

SRC = Path(gpucarve.__file__).parent
STATE = SRC / "engine" / "state.py"
PARTS = ("decided", "holds", "memos", "memo")
# what the cycle's steps name their CycleState (c) and the orchestrator its own (self.s, s)
STATES = ("c", "s")


def _reached(node: ast.AST) -> bool:
    """Whether `node` is an attribute (or item) reached through a part of the cycle's state, or
    an attribute of a name the steps give their CycleState (what that attribute holds, the
    working state or the placer, has writers of its own)."""
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id in STATES
    ):
        return True
    while isinstance(node, ast.Attribute | ast.Subscript):
        inner = node.value
        if isinstance(inner, ast.Attribute) and inner.attr in PARTS:
            return True
        if isinstance(inner, ast.Name) and inner.id in PARTS:
            return True
        node = inner
    return False


def state_writes(source: str) -> list[str]:
    return writes(source, _reached)


def test_no_engine_module_but_the_state_writes_the_cycles_state() -> None:
    written = {
        str(path.relative_to(SRC)): hits
        for path in sorted((SRC / "engine").rglob("*.py"))
        if path != STATE and (hits := state_writes(path.read_text()))
    }
    assert written == {}


@pytest.mark.parametrize(
    "line",
    [
        "c.decided.pending.append(p)",
        "c.pods_placed -= 1",
        "c.holds._queue_heads[k] = w",
        "c.memos._searches[q] += 1",
        "c.memo._flavors[w] = f",
        "self.s.decided.fresh.pop(w)",
        "c.quotas = q",
    ],
)
def test_the_check_finds_each_kind_of_write(line: str) -> None:
    assert len(state_writes(line)) == 1


def test_reading_the_state_and_calling_its_methods_are_not_writes() -> None:
    src = (
        "if c.decided.pending:\n    c.decided.wait(p)\n"
        "c.holds.hold_queue(q, f, w)\nn = c.decided.pods_placed\nc.ws.take(g, 1, 0)\n"
        "c.placer.hold(k, h)\n"
    )
    assert state_writes(src) == []


def test_the_parts_hand_out_read_only_views() -> None:
    # what a step reads is the part's own record, typed read-only: a write through the view
    # fails the type check, and the part's methods are the only writers
    for part in (Decided, Holds, Memos):
        public = [n for n, v in vars(part).items() if isinstance(v, property)]
        assert all(not getattr(part, n).fset for n in public)
    assert {"decided", "holds", "memos"} <= set(CycleState.__init__.__code__.co_names)
