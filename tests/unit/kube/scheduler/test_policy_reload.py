"""Following the mounted policy file: a valid change is returned once, an invalid one is
reported once and the running policy kept; the baseline is the file as it was read."""

from __future__ import annotations

from pathlib import Path

import yaml

from gpucarve.core.problems import InvalidInput
from gpucarve.kube.scheduler.policy_reload import PolicyReloader, digest
from tests.paths import BUILTIN


def _doc() -> dict[str, object]:
    return dict(yaml.safe_load((BUILTIN / "three-teams.yaml").read_text()))


def test_changes_are_picked_up_once_and_invalid_ones_reported_once(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(_doc()))
    refused: list[InvalidInput] = []
    r = PolicyReloader(path, [], refused.append)
    assert r.poll() is None  # unchanged
    doc = _doc()
    doc["metadata"] = {"name": "renamed"}
    path.write_text(yaml.safe_dump(doc))
    new = r.poll()
    assert new is not None and new.name == "renamed"
    assert r.poll() is None and r.reloads == 1
    path.write_text("pools: [\n")
    assert r.poll() is None
    assert len(refused) == 1 and r.refused == 1
    assert r.poll() is None and len(refused) == 1  # the same bad bytes: said once
    path.unlink()
    assert r.poll() is None  # mid-swap: looked at again later


def test_a_file_changed_after_it_was_read_is_picked_up(tmp_path: Path) -> None:
    # a standby reads the policy at start and builds its reloader once it leads
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(_doc()))
    read_as = digest(path)
    doc = _doc()
    doc["metadata"] = {"name": "later"}
    path.write_text(yaml.safe_dump(doc))
    r = PolicyReloader(path, [], lambda exc: None, loaded=read_as)
    new = r.poll()
    assert new is not None and new.name == "later"
