"""Writes in Python source, found by reading it (ast): assignments and deletions whose target,
and calls of a mutating method whose object, a predicate says is reached through what a test
guards. The sealing tests of the placer and of the cycle's state use it."""

from __future__ import annotations

import ast
from collections.abc import Callable

MUTATORS = {"setdefault", "update", "pop", "popitem", "clear", "append", "extend", "add",
            "discard", "remove", "insert", "__setitem__", "__delitem__"}  # fmt: skip


def writes(source: str, reached: Callable[[ast.AST], bool]) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign | ast.Delete):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        found += [ast.unparse(t) for t in targets if reached(t)]
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in MUTATORS
            and reached(node.func.value)
        ):
            found.append(ast.unparse(node))
    return found
