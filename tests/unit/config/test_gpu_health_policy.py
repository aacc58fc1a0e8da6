"""The policy's gpuHealth block: classes changed by name, the pool budget as a count or a
percentage, and errors that name the field and the fix."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from gpucarve.config.catalog_file import load_catalog
from gpucarve.config.examples import POLICY, example_text
from gpucarve.config.policy_build import build_policy
from gpucarve.core.gpu_faults import Action, Budget, Drain
from gpucarve.core.problems import InvalidInput


def build(health: dict[str, Any]) -> Any:
    doc = yaml.safe_load(example_text(POLICY))
    doc["gpuHealth"] = health
    return build_policy(doc, load_catalog([])).policy.gpu_health


def test_the_defaults_follow_the_catalogue() -> None:
    h = build({})
    assert h.budget == Budget(gpus=None, percent=50) and h.evict_pods is None
    assert h.evicts("memory-uncorrected") and not h.evicts("remap-pending")


def test_a_class_is_changed_by_name_and_a_budget_is_a_count_or_a_percentage() -> None:
    h = build({"classes": {"thermal": {"drain": "evict"}, "nvlink": {"action": "reboot"}},
               "maxOutOfService": "25%"})  # fmt: skip
    assert h.fault_class("thermal").drain is Drain.EVICT
    assert h.fault_class("thermal").action is Action.WAIT  # what was not named stays
    assert h.fault_class("nvlink").action is Action.REBOOT
    assert h.budget == Budget(gpus=None, percent=25)
    assert build({"maxOutOfService": 3}).budget == Budget(gpus=3, percent=None)


@pytest.mark.parametrize(
    ("health", "field", "words"),
    [
        ({"classes": {"thermall": {}}}, "gpuHealth.classes.thermall", "did you mean 'thermal'"),
        ({"maxOutOfService": "120%"}, "gpuHealth.maxOutOfService", "percentage"),
        ({"maxOutOfService": 0}, "gpuHealth.maxOutOfService", "≥ 1"),
        ({"maxOutOfService": "half"}, "gpuHealth.maxOutOfService", "count"),
    ],
)
def test_bad_health_settings_name_the_field_and_the_fix(
    health: dict[str, Any], field: str, words: str
) -> None:
    with pytest.raises(InvalidInput) as caught:
        build(health)
    (p,) = caught.value.problems
    assert ".".join(map(str, p.path)) == field
    assert words in f"{p.message} {p.fix}" and p.fix
