"""The placer is configured once, by the frozen context the cycle hands it, and changed only
through its own methods: no module outside it assigns one of its attributes or mutates what
one of them holds (`placer.reserved.setdefault(...)`, `placer.shapes[k] = ...`)."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

import gpucarve
from gpucarve.engine.placement.placer import PlacerContext
from tests.engine.writes import writes

SRC = Path(gpucarve.__file__).parent
PLACER = SRC / "engine" / "placement" / "placer.py"


def _through_placer(node: ast.AST) -> bool:
    """Whether `node` is an attribute reached through something named `placer`."""
    while isinstance(node, ast.Attribute | ast.Subscript):
        inner = node.value
        if isinstance(inner, ast.Attribute) and inner.attr == "placer":
            return True
        if isinstance(inner, ast.Name) and inner.id == "placer":
            return True
        node = inner
    return False


def writes_to_placer(source: str) -> list[str]:
    return writes(source, _through_placer)


def test_no_module_outside_the_placer_writes_to_it() -> None:
    written = {
        str(path.relative_to(SRC)): hits
        for path in sorted(SRC.rglob("*.py"))
        if path != PLACER and (hits := writes_to_placer(path.read_text()))
    }
    assert written == {}


@pytest.mark.parametrize(
    "line",
    [
        "c.placer.strict_holds = True",
        "c.placer.reserved.setdefault(k, h)",
        "self.placer.shapes[f] = n",
        "placer.current = w",
        "c.placer.current_end += 1",
    ],
)
def test_the_check_finds_each_kind_of_write(line: str) -> None:
    assert len(writes_to_placer(line)) == 1


def test_reading_the_placer_and_calling_its_methods_are_not_writes() -> None:
    src = "if c.placer.reserved:\n    c.placer.place_gang(w, plan)\nc.placer.hold(k, h)\n"
    assert writes_to_placer(src) == []


def test_the_context_is_frozen() -> None:
    ctx = PlacerContext()
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.shapes = {}  # type: ignore[misc]
