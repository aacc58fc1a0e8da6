"""Decisions are values: what a reason means is read from its `Stage`, `Plugin` and fields,
never from its message. A module that tests a message for a word (`"quota" in r.message`,
`r.message.startswith(...)`, `r.message == ...`) would break the day the wording changes;
this test finds any such comparison in the package."""

from __future__ import annotations

import ast
from pathlib import Path

import gpucarve

SRC = Path(gpucarve.__file__).parent
TEXT_ATTRS = ("message", "reason_text")


def _is_text(node: ast.AST) -> bool:
    """`x.message` (or a call on it, `x.message.lower()`)."""
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        node = node.func.value
    return isinstance(node, ast.Attribute) and node.attr in TEXT_ATTRS


def _matches(tree: ast.AST) -> list[int]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            literal = any(isinstance(s, ast.Constant) and isinstance(s.value, str) for s in sides)
            if literal and any(_is_text(s) for s in sides):
                out.append(node.lineno)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("startswith", "endswith", "find")
            and _is_text(node.func.value)
        ):
            out.append(node.lineno)
    return out


def test_the_finder_sees_a_match_on_message_text() -> None:
    bad = "def f(r):\n    return 'quota' in r.message or r.message.lower().startswith('no')\n"
    assert _matches(ast.parse(bad)) == [2, 2]


def test_no_module_reads_meaning_from_a_message() -> None:
    found = [
        f"{path.relative_to(SRC)}:{line}"
        for path in sorted(SRC.rglob("*.py"))
        for line in _matches(ast.parse(path.read_text()))
    ]
    assert found == []
