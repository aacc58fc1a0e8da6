"""Typed quantities (`core/amounts.py`): a bound with an explicit "no limit", and flavor and
quota-key names that mypy keeps apart, so a count per flavor is never read as a count per
quota key (a GPU unit's parts) without a conversion a reader sees."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import gpucarve
from gpucarve.core.amounts import NO_LIMIT_INT, UNLIMITED, Bound
from gpucarve.core.quantity import MAX_CPU_MILLI, MAX_MEMORY_MIB
from tests.engine.builders import policy, pool, queue

SRC = Path(gpucarve.__file__).parent
ROOT = SRC.parents[1]


def test_bound_arithmetic() -> None:
    five = Bound.at(5)
    assert not five.unlimited and UNLIMITED.unlimited
    assert five.exceeded_by(6) and not five.exceeded_by(5)
    assert not UNLIMITED.exceeded_by(10**18)
    assert five.cap(9) == 5 and five.cap(3) == 3 and UNLIMITED.cap(9) == 9
    assert five.or_else(8) == 5 and UNLIMITED.or_else(8) == 8
    assert five.plus(3) == Bound.at(8) and UNLIMITED.plus(3) is UNLIMITED
    assert five.or_int() == 5 and UNLIMITED.or_int() == NO_LIMIT_INT
    assert five.text() == "5" and UNLIMITED.text() == "-"
    assert Bound.at(12).text(lambda n: f"{n / 8:g} GPUs") == "1.5 GPUs"


def test_no_limit_int_is_past_every_parsed_quantity() -> None:
    # the integer stand-in for "no limit" must compare above any real node or pod, and what
    # is taken from or given back to it must stay inside int64 (numpy arrays of free CPU)
    most = max(MAX_CPU_MILLI, MAX_MEMORY_MIB)
    assert most * 1000 < NO_LIMIT_INT
    assert NO_LIMIT_INT + most * 1000 < 2**63


def test_policy_limits_are_bounds() -> None:
    p = policy(
        pools=[pool("train", "H100-SXM5-80GB", 2, 8)],
        cohorts=[{"name": "c"}],
        queues=[
            queue("a", {"h100-full": {"nominal": 8, "borrowingLimit": 4, "lendingLimit": 2}},
                  cohort="c"),
            queue("b", {"h100-full": {"nominal": 8}}, cohort="c"),
        ],
    )  # fmt: skip
    a, b = (p.queue(n).quotas[0] for n in ("a", "b"))
    assert a.borrowing_limit == Bound.at(4) and a.lending_limit == Bound.at(2)
    assert a.lendable == 2
    assert b.borrowing_limit is UNLIMITED or b.borrowing_limit.unlimited
    assert b.lendable == 8  # lends all of nominal without a lending limit


def test_no_sentinel_for_unlimited_outside_amounts() -> None:
    """`1 << 62` (or any such literal) for "no limit" lives in `core/amounts.py` alone."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if path.name == "amounts.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.LShift):
                left, right = node.left, node.right
                if (isinstance(left, ast.Constant) and left.value == 1
                        and isinstance(right, ast.Constant) and right.value >= 60):  # fmt: skip
                    found.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert not found, found


_MIXED = """
from gpucarve.core.amounts import FlavorName, QuotaKey
from gpucarve.engine.quota import Quotas

def mixed(q: Quotas, flavor: FlavorName, key: QuotaKey) -> None:
    q.used("a", flavor)
    q.keys("a", key)
    q.charge("a", {key: 1})

def converted(q: Quotas, flavor: FlavorName, key: QuotaKey) -> None:
    from gpucarve.core.amounts import as_flavor, as_key
    q.used("a", as_key(flavor))
    q.keys("a", as_flavor(key))
"""


def test_mypy_keeps_flavors_and_quota_keys_apart(tmp_path: Path) -> None:
    snippet = tmp_path / "snippet.py"
    snippet.write_text(_MIXED)
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent",
         "--cache-dir", str(tmp_path / "cache"), str(snippet)],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    lines = {int(line.split(":")[1]) for line in errors}
    # the three calls that mix the names are refused; the converted ones pass
    assert lines == {6, 7, 8}, done.stdout
    assert all("FlavorName" in e and "QuotaKey" in e for e in errors), errors
