"""Problems found in user input: where, what, and how to fix it.

Every validator in gpucarve reports through `Problem` values instead of raising on the first
mistake, so a user sees every error in a file at once. Exceptions are kept for bugs and for
the one place that turns a list of problems into a failed load (`InvalidInput`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

PathPart = str | int
Path = tuple[PathPart, ...]


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True, slots=True)
class Problem:
    """One finding about user input.

    `code` is a stable identifier (kebab-case) that tests and tools can match on; the
    message may be reworded, the code may not.
    """

    path: Path
    code: str
    message: str
    fix: str
    severity: Severity = Severity.ERROR
    line: int | None = None

    @property
    def location(self) -> str:
        return format_path(self.path)

    def plain(self) -> str:
        """One line of plain text, as `gpucarve plan` prints the problem (where the
        scheduler writes it too: a pod condition, an Event)."""
        return f"validation/{self.code}: {self.location}: {self.message}; fix: {self.fix}"


def format_path(path: Sequence[PathPart]) -> str:
    """Render a path the way users write it: `pools[1].sharing.mig.layout`."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif out:
            out += f".{part}"
        else:
            out = part
    return out or "(document)"


def errors(problems: Iterable[Problem]) -> list[Problem]:
    return [p for p in problems if p.severity is Severity.ERROR]


class InvalidInput(Exception):
    """Raised by loaders when the input has at least one error-severity problem."""

    def __init__(self, source: str, problems: Sequence[Problem]) -> None:
        self.source = source
        self.problems = tuple(problems)
        n = len(errors(self.problems))
        super().__init__(f"{source}: {n} error(s)")
