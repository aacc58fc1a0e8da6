"""The shipped examples: the valid one builds, each invalid one fails with the error it
declares in its `# expect:` header (code, path, message and fix fragments)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from gpucarve.config.policy_build import load_policy
from gpucarve.core.policy import SharingMode
from gpucarve.core.problems import InvalidInput, Severity
from tests.paths import BUILTIN, EXAMPLES

INVALID = sorted((EXAMPLES / "invalid").glob("*.yaml"))


def expectation(path: Path) -> dict[str, str]:
    for line in path.read_text().splitlines():
        m = re.match(r"#\s*expect:\s*(.*)$", line)
        if m:
            return dict(part.split("=", 1) for part in shlex.split(m.group(1)))
    raise AssertionError(f"{path.name} has no '# expect:' line")


def test_three_teams_example_is_valid() -> None:
    loaded = load_policy(BUILTIN / "three-teams.yaml")
    p = loaded.policy
    assert loaded.warnings == ()
    assert [pool.name for pool in p.pools] == ["training", "production", "dev"]
    assert p.capacity == {
        "a100-mig-1g.10gb": 32,
        "a100-mig-2g.20gb": 16,
        "a100-mig-3g.40gb": 16,
        "h100-full": 32,
        "l40s-shared": 48,
    }
    research = p.queue("research").quota("h100-full")
    assert research is not None and (research.nominal, research.borrowing_limit.most) == (16, 16)
    production = p.queue("production")
    assert production.quota("a100-mig-3g.40gb").nominal == 12  # type: ignore[union-attr]
    assert production.quota("a100-mig-1g.10gb").nominal == 16  # type: ignore[union-attr]
    assert dict(production.max_per_workload) == {"a100-mig-3g.40gb": 4}
    # production's guaranteed MIG quota leaves room for others to borrow
    assert p.capacity["a100-mig-3g.40gb"] > 12 and p.capacity["a100-mig-1g.10gb"] > 4
    dev = p.pool("dev")
    assert (dev.sharing, dev.replicas, dev.gpus) == (SharingMode.TIME_SLICING, 8, 6)
    assert {c.name: c.preemptible for c in p.priority_classes}["dev-best-effort"] is True


def test_there_is_an_invalid_example_per_class_of_mistake() -> None:
    codes = {expectation(p)["code"] for p in INVALID}
    assert len(INVALID) >= 15
    assert {
        "mig-layout-invalid",
        "unknown-gpu-model",
        "unknown-key",
        "wrong-type",
        "yaml-syntax",
        "quota-exceeds-capacity",
        "unknown-cohort",
        "unknown-mig-profile",
    } <= codes


@pytest.mark.parametrize("path", INVALID, ids=[p.stem for p in INVALID])
def test_invalid_example_fails_with_its_declared_error(path: Path) -> None:
    want = expectation(path)
    with pytest.raises(InvalidInput) as exc:
        load_policy(path)
    errors = [p for p in exc.value.problems if p.severity is Severity.ERROR]
    matching = [p for p in errors if p.code == want["code"] and p.location == want["path"]]
    assert matching, [(p.code, p.location, p.message) for p in errors]
    problem = matching[0]
    assert want.get("message", "") in problem.message
    assert want.get("fix", "") in problem.fix
    assert problem.fix.strip()


def test_case_study_layout_suggests_valid_layouts() -> None:
    with pytest.raises(InvalidInput) as exc:
        load_policy(EXAMPLES / "invalid" / "case-study-layout.yaml")
    (problem,) = exc.value.problems
    assert "3g.40gb takes 4 memory slices (×2 = 8)" in problem.message
    assert "{2×3g.40gb}" in problem.fix and "{3g.40gb + 2g.20gb + 2×1g.10gb}" in problem.fix
    assert problem.line == 16
