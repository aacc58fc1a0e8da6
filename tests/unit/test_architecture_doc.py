"""docs/architecture.md names no file, folder or contract that is not there: every path it
gives in backticks is a file or folder of the repository (a short one, `plugins.py`, is found
at the end of one), and every contract it quotes is one import-linter checks."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "architecture.md").read_text()
PATH = re.compile(r"`([A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)*(?:\.(?:py|md|yaml|sh|toml|tpl)|/))`")
FOLDER = re.compile(r"`((?:[a-z_]+/)+[a-z_]+)`")


def _everything() -> list[str]:
    out = []
    for p in ROOT.rglob("*"):
        rel = p.relative_to(ROOT)
        if rel.parts[0] in (".git", ".venv", "node_modules") or "__pycache__" in rel.parts:
            continue
        out.append(str(rel) + ("/" if p.is_dir() else ""))
    return out


def test_every_path_the_map_names_is_there() -> None:
    names = set(PATH.findall(DOC)) | {f + "/" for f in FOLDER.findall(DOC)}
    assert len(names) > 50  # the map names its rooms' files
    known = _everything()
    missing = [
        n
        for n in sorted(names)
        if not any(k == n or k.endswith("/" + n) or k == n.rstrip("/") for k in known)
    ]
    assert missing == []


def test_every_contract_the_map_quotes_is_checked() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = {c["name"] for c in config["tool"]["importlinter"]["contracts"]}
    quoted = re.findall(r'the contract "([^"]+)"', DOC)
    assert quoted, "the map quotes no contract"
    assert [q for q in quoted if q not in contracts] == []
