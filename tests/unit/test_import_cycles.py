"""No module imports itself back, through any chain: a cycle is two modules that cannot be
understood, tested or moved apart. Imports under `TYPE_CHECKING` count too (a cycle hidden
from the interpreter is still one for a reader). The layers themselves are import-linter's
contracts in pyproject.toml (`make layers`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import grimp


def strongly_connected(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Tarjan's components of more than one module (or a module importing itself), each
    sorted, in sorted order; iterative, so a deep package cannot overflow the stack."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(graph.get(root, ())))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, todo = work[-1]
            if todo:
                nxt = todo.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph.get(nxt, ()))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                part: list[str] = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    part.append(m)
                    if m == node:
                        break
                if len(part) > 1 or node in graph.get(node, ()):
                    found.append(sorted(part))
    return sorted(found)


def import_graph() -> dict[str, set[str]]:
    g = grimp.build_graph("gpucarve", exclude_type_checking_imports=False)
    out: dict[str, set[str]] = {}
    for module in g.modules:
        targets = g.find_modules_directly_imported_by(module)
        # A package's __init__ re-exporting its own modules is not a cycle of meaning: the
        # edge from a child to its parent package is the parent's public names.
        out[module] = {t for t in targets if not module.startswith(t + ".")}
    return out


def test_no_module_import_cycles() -> None:
    cycles = strongly_connected(import_graph())
    assert cycles == [], "module import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_the_check_finds_a_cycle_and_one_through_three_modules() -> None:
    assert strongly_connected({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c"]]
    assert strongly_connected({"a": {"a"}}) == [["a"]]
    assert strongly_connected({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_type_checking_imports_are_in_the_graph() -> None:
    # the agent imports its publisher only for type checking (it loads gRPC)
    g = import_graph()
    assert "gpucarve.agent.publisher" in g["gpucarve.agent.health_loop"]
