"""The core stays pure: it imports only an allow-list of standard-library modules and other
core modules. No clock, randomness, UUIDs, file system, network, Kubernetes or YAML."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "gpucarve"
CORE = SRC / "core"
ENGINE = SRC / "engine"

ALLOWED = {
    "__future__",
    "abc",
    "bisect",
    "collections",
    "collections.abc",
    "contextlib",
    "dataclasses",
    "difflib",
    "enum",
    "fractions",
    "functools",
    # the engine holds the cyclic collector off while a cycle runs (engine/engine.py): when
    # garbage goes never changes a decision (tests/engine/test_determinism.py)
    "gc",
    "heapq",
    "itertools",
    "math",
    "operator",
    "re",
    "types",
    "typing",
    # snapshots hold their parent weakly (core/snapshot.py Delta): whether it still lives only
    # picks the faster of two ways to the same engine state, never a decision
    "weakref",
    # array arithmetic for the fragmentation model (engine/placement/fragment.py):
    # deterministic, and its random module is refused below
    "numpy",
    "numpy.typing",
}
FORBIDDEN_EXAMPLES = {
    "time",
    "random",
    "uuid",
    "os",
    "pathlib",
    "socket",
    "asyncio",
    "datetime",
    "kubernetes",
    "prometheus_client",
    "yaml",
    "io",
    "subprocess",
    "threading",
}


def imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = "gpucarve." + path.parent.name + "."
                found.append((node.lineno, package + (node.module or "")))
            else:
                found.append((node.lineno, node.module or ""))
        elif isinstance(node, ast.Call) and getattr(node.func, "id", "") in (
            "__import__",
            "exec",
            "eval",
            "open",
        ):
            found.append((node.lineno, f"<call {node.func.id}>"))  # type: ignore[attr-defined]
    return found


PURE_FILES = sorted(CORE.rglob("*.py")) + sorted(ENGINE.rglob("*.py"))


FACE = ENGINE / "__init__.py"


def _allowed(path: Path, mod: str) -> bool:
    if mod in ALLOWED or mod == "gpucarve.core" or mod.startswith("gpucarve.core."):
        return True
    if path == FACE and mod == "importlib":
        return True  # the face loads its own modules when first asked (test below)
    # the engine may use itself; the core may not use the engine
    in_engine = ENGINE in path.parents
    return in_engine and (mod == "gpucarve.engine" or mod.startswith("gpucarve.engine."))


@pytest.mark.parametrize("path", PURE_FILES, ids=[f"{p.parent.name}/{p.name}" for p in PURE_FILES])
def test_core_and_engine_import_only_pure_modules(path: Path) -> None:
    bad = [
        f"{path.name}:{line} imports {mod}"
        for line, mod in imports(path)
        if not _allowed(path, mod)
    ]
    assert bad == []


@pytest.mark.parametrize("path", PURE_FILES, ids=[f"{p.parent.name}/{p.name}" for p in PURE_FILES])
def test_no_randomness_through_numpy(path: Path) -> None:
    text = path.read_text()
    assert not [s for s in ("np.random", "numpy.random", "default_rng") if s in text]


def test_the_check_catches_a_forbidden_import(tmp_path: Path) -> None:
    sample = tmp_path / "x.py"
    sample.write_text("import time\nfrom random import choice\nfrom gpucarve.config import x\n")
    mods = {m for _, m in imports(sample)}
    assert {"time", "random", "gpucarve.config"} <= mods
    assert not (mods & ALLOWED)
    assert FORBIDDEN_EXAMPLES.isdisjoint(ALLOWED)


def test_the_face_loads_only_the_engines_own_modules() -> None:
    import gpucarve.engine as face

    where = face._WHERE
    assert sorted(where) == sorted(face.__all__)
    assert all(m.startswith("gpucarve.engine.") for m, _ in where.values())
    # what it hands out is what the module named holds
    import importlib

    for name, (module, attr) in where.items():
        assert getattr(face, name) is getattr(importlib.import_module(module), attr)
