"""Read a user's text file once, the same way for every reader (YAML, CSV, JSONL).

Every failure is a `Problem` naming the file and, where it is about the content, the line:
a missing file, a folder, a file too large for what it claims to be, bytes that are not UTF-8,
a NUL byte. A UTF-8 byte-order mark (Windows editors write one) is dropped, so the first
column of a CSV is not silently renamed `\\ufeffname`.
"""

from __future__ import annotations

from pathlib import Path

from gpucarve.core.problems import InvalidInput, Problem

MiB = 1024 * 1024
POLICY_MAX_BYTES = 16 * MiB  # policies, catalogs, workload lists, mig-parted configurations
TRACE_MAX_BYTES = 512 * MiB  # traces: the public ones are a few MiB; far more than any needs
BOM = "\ufeff"


def _fail(source: str, code: str, message: str, fix: str, line: int | None = None) -> InvalidInput:
    return InvalidInput(source, [Problem((), code, message, fix, line=line)])


def line_at(data: bytes | str, offset: int) -> tuple[int, int]:
    """(line, column), both 1-based, of a byte or character offset."""
    if isinstance(data, bytes):
        line, start = data.count(b"\n", 0, offset) + 1, data.rfind(b"\n", 0, offset) + 1
    else:
        line, start = data.count("\n", 0, offset) + 1, data.rfind("\n", 0, offset) + 1
    return line, offset - start + 1


def read_text(path: str | Path, what: str, max_bytes: int = POLICY_MAX_BYTES) -> str:
    """The file's text; `what` names what it should be, for the fixes ("a policy YAML file")."""
    p = Path(path)
    source = str(path)
    try:
        if p.is_dir():
            raise _fail(source, "not-a-file", "is a directory", f"pass {what}")
        with p.open("rb") as fh:
            raw = fh.read(max_bytes + 1)
    except FileNotFoundError:
        raise _fail(source, "file-not-found", "no such file", "check the path") from None
    except OSError as exc:
        raise _fail(
            source, "file-unreadable", f"cannot read: {exc.strerror or exc}", f"pass {what}"
        ) from None
    if len(raw) > max_bytes:
        raise _fail(
            source,
            "file-too-large",
            f"larger than {max_bytes // MiB} MiB, more than {what} can be",
            f"pass {what}",
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line, col = line_at(raw, exc.start)
        raise _fail(
            source,
            "not-utf8",
            f"line {line}, column {col}: byte 0x{raw[exc.start]:02x} is not UTF-8 text",
            "save the file as UTF-8",
            line,
        ) from None
    text = text.removeprefix(BOM)
    nul = text.find("\x00")
    if nul >= 0:
        line, col = line_at(text, nul)
        raise _fail(
            source,
            "nul-byte",
            f"line {line}, column {col}: a NUL byte; {what} is text",
            "remove the NUL byte (the file may be binary or truncated)",
            line,
        )
    return text
