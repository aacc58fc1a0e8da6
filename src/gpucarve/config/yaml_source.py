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

from gpucarve.core.problems import InvalidInput, Path, Problem

MAX_BYTES = 16 * 1024 * 1024


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


def parse_yaml(text: str, source: str) -> YamlDocument:
    try:
        nodes = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        what = exc.problem or str(exc)
        raise InvalidInput(
            source,
            [_problem(f"{where}malformed YAML: {what}", "fix the YAML syntax at that position")],
        ) from None
    except yaml.YAMLError as exc:
        raise InvalidInput(
            source, [_problem(f"malformed YAML: {exc}", "fix the YAML syntax")]
        ) from None
    nodes = [n for n in nodes if n is not None]
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
    lines: dict[Path, int] = {}
    problems: list[Problem] = []
    _walk(nodes[0], (), lines, problems)
    if problems:
        raise InvalidInput(source, problems)
    try:
        data = yaml.safe_load(text)
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


def read_yaml(path: str | FsPath) -> YamlDocument:
    p = FsPath(path)
    source = str(path)
    try:
        if p.is_dir():
            raise InvalidInput(
                source,
                [_problem("is a directory", "pass a YAML file", code="not-a-file")],
            )
        raw = p.read_bytes()
    except FileNotFoundError:
        raise InvalidInput(
            source, [_problem("no such file", "check the path", code="file-not-found")]
        ) from None
    except OSError as exc:
        raise InvalidInput(
            source,
            [_problem(f"cannot read: {exc.strerror}", "check the path", code="file-unreadable")],
        ) from None
    if len(raw) > MAX_BYTES:
        raise InvalidInput(
            source,
            [_problem("file larger than 16 MiB", "pass a policy file", code="file-too-large")],
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(
            source,
            [
                _problem(
                    f"not UTF-8 text (byte {exc.start})",
                    "save the file as UTF-8",
                    code="not-utf8",
                )
            ],
        ) from None
    return parse_yaml(text, source)
