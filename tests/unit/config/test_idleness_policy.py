"""A queue's idleness rule: built into the queue, rendered back as written, and bad settings
refused with the field and the fix."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from gpucarve.config.catalog_file import load_catalog
from gpucarve.config.examples import POLICY, example_text
from gpucarve.config.policy_build import build_policy
from gpucarve.core.held_idle import IdleRule, IdleStage
from gpucarve.core.problems import InvalidInput
from gpucarve.render.objects import idleness_spec


def build(rule: dict[str, Any]) -> Any:
    doc = yaml.safe_load(example_text(POLICY))
    doc["queues"][0]["idleness"] = rule
    return build_policy(doc, load_catalog([])).policy.queues[0]


RULE = {"activityBelow": 5, "warnAfterSeconds": 900, "reclaimAfterSeconds": 3600}


def test_the_rule_is_built_and_rendered_back_as_written() -> None:
    q = build({**RULE, "withinQuota": "reclaim"})
    assert q.idleness == IdleRule(5, 900, 3600, within_quota=True)
    assert idleness_spec(q.idleness) == {**RULE, "withinQuota": "reclaim"}
    assert build(RULE).idleness.within_quota is False  # work within quota is only warned


def test_stages_follow_the_windows() -> None:
    rule = IdleRule(5, 900, 3600)
    assert [rule.stage(s, 4000) for s in (None, 3500, 3000, 400)] == [
        IdleStage.ACTIVE, IdleStage.ACTIVE, IdleStage.WARNED, IdleStage.RECLAIMABLE,
    ]  # fmt: skip
    assert IdleRule(5, 900, None).stage(0, 10**6) is IdleStage.WARNED


@pytest.mark.parametrize(
    ("rule", "field", "words"),
    [
        ({**RULE, "reclaimAfterSeconds": 600}, "queues.0.idleness.reclaimAfterSeconds",
         "at least warnAfterSeconds"),
        ({**RULE, "activityBelow": 0}, "queues.0.idleness.activityBelow", "> 0"),
        ({**RULE, "warnAfterSeconds": 5}, "queues.0.idleness.warnAfterSeconds", "60"),
        ({**RULE, "withinQuota": "evict"}, "queues.0.idleness.withinQuota", "reclaim"),
        ({"activityBelow": 5, "reclaimAfterSeconds": 600}, "queues.0.idleness.warnAfterSeconds",
         ""),
    ],
)  # fmt: skip
def test_bad_idleness_settings_name_the_field_and_the_fix(
    rule: dict[str, Any], field: str, words: str
) -> None:
    with pytest.raises(InvalidInput) as caught:
        build(rule)
    (p,) = caught.value.problems
    assert ".".join(map(str, p.path)) == field
    assert words in f"{p.message} {p.fix}" and p.fix
