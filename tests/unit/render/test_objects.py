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


def test_cohorts_render_their_parent_weight_and_own_quota() -> None:
    from gpucarve.render.objects import policy_objects
    from tests.paths import EXAMPLES

    p = load_policy(EXAMPLES / "departments" / "policy.yaml").policy
    kinds = [(o["kind"], o["metadata"]["name"]) for o in policy_objects(p)]
    # priority classes, then cohorts, then queues: a queue's cohort exists before it
    assert [k for k in kinds if k[0] == "Cohort"] == [("Cohort", "company"), ("Cohort", "ml")]
    assert kinds.index(("Cohort", "ml")) < kinds.index(("Queue", "data-science"))
    ml = next(o for o in policy_objects(p) if o["metadata"]["name"] == "ml")
    assert ml["spec"]["parent"] == "company" and ml["spec"]["weight"] == 1
    q = policy(
        pools=[pool("inf", "A100-80GB", 1, 2, "mig", mig={"layout": {"3g.40gb": 2}})],
        cohorts=[
            {"name": "top"},
            {
                "name": "dept",
                "parent": "top",
                "quota": {"a100": {"nominal": 0.5, "lendingLimit": 1}},
            },
        ],
        queues=[queue("serve", {"a100": {"nominal": 1}}, cohort="dept")],
    )
    dept = next(o for o in policy_objects(q) if o["metadata"]["name"] == "dept")
    assert dept["spec"]["quota"] == {"a100": {"nominal": 0.5, "lendingLimit": 1}}
    top = next(o for o in policy_objects(q) if o["metadata"]["name"] == "top")
    assert "parent" not in top["spec"] and "quota" not in top["spec"]
