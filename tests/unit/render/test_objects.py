"""The Queue objects the policy renders carry its quotas as the policy wrote them: a limit
where one is set, none where none is (not 0, not a sentinel), a GPU unit's in GPUs."""

from __future__ import annotations

import yaml

from gpucarve.config.policy_build import load_policy
from gpucarve.render.objects import queue_manifest
from tests.engine.builders import policy, pool, queue
from tests.paths import BUILTIN


def test_each_queue_renders_the_quota_the_policy_file_wrote() -> None:
    path = BUILTIN / "three-teams.yaml"
    written = {q["name"]: q["quota"] for q in yaml.safe_load(path.read_text())["queues"]}
    p = load_policy(path).policy
    rendered = {q.name: queue_manifest(q, p.units)["spec"]["quota"] for q in p.queues}
    assert rendered == written
    assert "lendingLimit" not in rendered["research"]["h100-full"]  # none set: none rendered


def test_a_gpu_units_limits_render_in_gpus() -> None:
    spec = {"a100": {"nominal": 1.5, "borrowingLimit": 0.5, "lendingLimit": 1}}
    p = policy(
        pools=[pool("inf", "A100-80GB", 1, 2, "mig", mig={"layout": {"3g.40gb": 2}})],
        cohorts=[{"name": "c"}],
        queues=[queue("serve", spec, cohort="c")],
    )
    assert queue_manifest(p.queues[0], p.units)["spec"]["quota"] == spec
