"""Read one YAML document safely and remember where each value came from.

PyYAML silently keeps the last of two equal keys; a policy where `nominal:` appears twice must
not quietly use one of them, so duplicates are reported. Each value's line is kept so that an
error at `pools[1].sharing.mig.layout` can also say `line 24`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path as FsPath
from typing import Any

import yaml

from gpucarve.config.textfile import POLICY_MAX_BYTES, line_at, read_text
from gpucarve.core.problems import InvalidInput, Path, Problem

# An anchor may be reused, but a few hundred bytes of aliases must not expand into gigabytes
# (the "billion laughs"), and nesting must stay far from Python's recursion limit. Policies
# nest about 8 levels and use a handful of aliases, if any.
MAX_DEPTH = 64
MAX_ALIASES = 1_000
MAX_EXPANSION = 100_000  # nodes that aliases may add beyond those written out


class _Refused(Exception):
    def __init__(self, code: str, message: str, fix: str, mark: Any) -> None:
        super().__init__(message)
        self.code, self.message, self.fix, self.mark = code, message, fix, mark


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader with a depth limit, an alias budget and no alias inside its own
    anchor (PyYAML builds a cyclic object from `&m {self: *m}`)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self._depth = 0
        self._aliases = 0
        self._open: list[str] = []

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent):
            self._aliases += 1
            if event.anchor in self._open:
                raise _Refused(
                    "yaml-alias-cycle",
                    f"alias *{event.anchor} is used inside its own anchor &{event.anchor}",
                    "write the value out: a document cannot contain itself",
                    event.start_mark,
                )
            if self._aliases > MAX_ALIASES:
                raise _Refused(
                    "yaml-too-many-aliases",
                    f"more than {MAX_ALIASES} aliases (*name)",
                    "write the values out instead of repeating aliases",
                    event.start_mark,
                )
            return super().compose_node(parent, index)
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise _Refused(
                "yaml-too-deep",
                f"nested more than {MAX_DEPTH} levels deep",
                "flatten the document; a policy nests about 8 levels",
                event.start_mark,
            )
        anchor = getattr(event, "anchor", None)
        if anchor is not None:
            self._open.append(anchor)
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1
            if anchor is not None:
                self._open.pop()


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _expansion(root: yaml.Node) -> int:
    """How many nodes the aliases add: the document's size with every alias expanded, less
    the nodes written out. Sizes are memoised per node, so a bomb is measured, not expanded."""
    sizes: dict[int, int] = {}
    order: list[yaml.Node] = []
    stack = [root]
    while stack:  # post-order without recursion
        node = stack.pop()
        if id(node) in sizes:
            continue
        sizes[id(node)] = 0
        order.append(node)
        stack.extend(_children(node))
    for node in reversed(order):
        sizes[id(node)] = 1 + sum(sizes[id(c)] for c in _children(node))
    return sizes[id(root)] - len(order)


@dataclass(frozen=True)
class YamlDocument:
    source: str
    data: Any
    lines: dict[Path, int] = field(default_factory=dict)

    def line_of(self, path: Path) -> int | None:
        """Line of the deepest prefix of `path` that the document has (1-based)."""
        for end in range(len(path), -1, -1):
            line = self.lines.get(tuple(path[:end]))
            if line is not None:
                return line
        return None


def _problem(message: str, fix: str, code: str = "yaml-syntax") -> Problem:
    return Problem((), code, message, fix)


def _compose(text: str, source: str) -> tuple[_Loader, list[yaml.Node]]:
    try:
        loader = _Loader(text)
        nodes: list[yaml.Node] = []
        while loader.check_node():
            node = loader.get_node()
            if node is not None:
                nodes.append(node)
    except _Refused as exc:
        where = f"line {exc.mark.line + 1}, column {exc.mark.column + 1}: " if exc.mark else ""
        line = exc.mark.line + 1 if exc.mark else None
        raise InvalidInput(
            source, [Problem((), exc.code, where + exc.message, exc.fix, line=line)]
        ) from None
    except yaml.reader.ReaderError as exc:  # a control character, found before parsing
        line, col = line_at(text, exc.position)
        raise InvalidInput(
            source,
            [
                Problem(
                    (),
                    "yaml-syntax",
                    f"line {line}, column {col}: character U+{exc.character:04X} is not allowed "
                    "in YAML",
                    "remove it, or write it as an escape in a double-quoted string",
                    line=line,
                )
            ],
        ) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        what = exc.problem or str(exc)
        raise InvalidInput(
            source,
            [
                Problem(
                    (),
                    "yaml-syntax",
                    f"{where}malformed YAML: {what}",
                    "fix the YAML syntax at that position",
                    line=mark.line + 1 if mark else None,
                )
            ],
        ) from None
    except yaml.YAMLError as exc:
        raise InvalidInput(
            source, [_problem(f"malformed YAML: {exc}", "fix the YAML syntax")]
        ) from None
    return loader, nodes


def parse_yaml(text: str, source: str) -> YamlDocument:
    loader, nodes = _compose(text, source)
    if not nodes:
        raise InvalidInput(
            source, [_problem("the file is empty", "write a YAML document", code="empty-document")]
        )
    if len(nodes) > 1:
        raise InvalidInput(
            source,
            [
                _problem(
                    f"the file holds {len(nodes)} YAML documents, gpucarve reads one",
                    "keep one document (remove the `---` separators)",
                    code="multiple-documents",
                )
            ],
        )
    try:
        return _document(loader, nodes[0], source)
    finally:
        loader.dispose()


def parse_yaml_all(text: str, source: str) -> list[YamlDocument]:
    """Every document of a `---`-separated stream (as `kubectl get -o yaml` and manifests
    are kept), each checked as `parse_yaml` checks one; empty documents are skipped."""
    loader, nodes = _compose(text, source)
    if not nodes:
        raise InvalidInput(
            source, [_problem("the file is empty", "write a YAML document", code="empty-document")]
        )
    out = []
    try:
        for i, node in enumerate(nodes):
            doc = _document(loader, node, source if len(nodes) == 1 else f"{source}#{i + 1}")
            if doc.data is not None:
                out.append(doc)
    finally:
        loader.dispose()
    return out


def _document(loader: _Loader, node: yaml.Node, source: str) -> YamlDocument:
    nodes = [node]
    added = _expansion(nodes[0])
    if added > MAX_EXPANSION:
        raise InvalidInput(
            source,
            [
                _problem(
                    f"aliases (*name) expand the document by {added:,} values, more than "
                    f"{MAX_EXPANSION:,}",
                    "write the values out, or reuse fewer anchors inside anchors",
                    code="yaml-alias-expansion",
                )
            ],
        )
    lines: dict[Path, int] = {}
    problems: list[Problem] = []
    _walk(nodes[0], (), lines, problems)
    if problems:
        raise InvalidInput(source, problems)
    try:
        data = loader.construct_document(nodes[0])
    except yaml.YAMLError as exc:  # e.g. a bad timestamp or an unhashable key
        raise InvalidInput(source, [_problem(f"malformed YAML: {exc}", "fix the value")]) from None
    return YamlDocument(source, data, lines)


def _walk(node: yaml.Node, path: Path, lines: dict[Path, int], problems: list[Problem]) -> None:
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                problems.append(
                    Problem(
                        path,
                        "bad-key",
                        f"line {key_node.start_mark.line + 1}: a key must be a plain string",
                        "use a scalar key",
                    )
                )
                continue
            key = str(key_node.value)
            line = key_node.start_mark.line + 1
            if key in seen:
                problems.append(
                    Problem(
                        (*path, key),
                        "duplicate-key",
                        f"line {line}: key {key!r} appears twice (first on line {seen[key]})",
                        "keep one of them: YAML would silently use the last one",
                    )
                )
                continue
            seen[key] = line
            _walk(value_node, (*path, key), lines, problems)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _walk(item, (*path, i), lines, problems)


def objects_of(data: Any) -> list[Any]:
    """A kubectl List's items, or the document itself (what `kubectl get -o yaml` prints for
    one object or several)."""
    items = data.get("items") if isinstance(data, dict) else None
    if isinstance(data, dict) and data.get("kind") == "List" and isinstance(items, list):
        return list(items)
    return [data]


def read_yaml(path: str | FsPath, what: str = "a YAML file") -> YamlDocument:
    return parse_yaml(read_text(path, what, POLICY_MAX_BYTES), str(path))


def read_yaml_all(path: str | FsPath, what: str = "a YAML file") -> list[YamlDocument]:
    return parse_yaml_all(read_text(path, what, POLICY_MAX_BYTES), str(path))
