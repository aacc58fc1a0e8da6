"""The webhook and `import quotas`, fed hostile objects: an AdmissionReview of any shape is
answered 200 (a decision with its uid) or 4xx, never a server error; a quota file of any
shape is read or refused with `InvalidInput` whose problems all have a fix."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from gpucarve.config.policy_build import load_policy
from gpucarve.config.quota_import import import_quotas
from gpucarve.core.problems import InvalidInput
from tests.fuzz.budget import fuzz_settings
from tests.paths import BUILTIN
from tests.unit.webhook.test_server import _post

POLICY = load_policy(BUILTIN / "three-teams.yaml").policy

# Keys the webhook and the importer look at, so the objects reach deep into the checks.
KEYS = [
    "metadata", "spec", "containers", "initContainers", "ephemeralContainers", "resources",
    "limits", "requests", "nvidia.com/gpu", "nvidia.com/mig-3g.40gb", "annotations", "labels",
    "gpucarve.io/gpu-fraction", "gpucarve.io/queue", "gpucarve.io/assignment", "env",
    "envFrom", "securityContext", "privileged", "volumes", "hostPath", "path", "nodeName",
    "schedulerName", "affinity", "nodeAffinity", "nodeSelector", "quota", "cohort", "hard",
    "items", "kind", "value", "namespace", "name", "prefix", "configMapRef", "minMember",
]  # fmt: skip
leaves = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**12), 10**12), st.floats(allow_nan=False),
    st.sampled_from(["1", "8", "1000", "all", "void", "/dev", "x", "", "\ud800", "é", "-1"]),
    st.text(max_size=6),
)  # fmt: skip
values: Any = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(max_size=4)), inner, max_size=5),
    ),
    max_leaves=40,
)


@fuzz_settings(200)
@given(
    obj=values,
    old=values,
    kind=st.sampled_from(["Pod", "Queue", "PodGroup", "Other"]),
    operation=st.sampled_from(["CREATE", "UPDATE", "DELETE"]),
    sub=st.sampled_from([None, "ephemeralcontainers", "status"]),
)
def test_any_admission_review_gets_a_decision_or_a_4xx(
    obj: Any, old: Any, kind: str, operation: str, sub: str | None
) -> None:
    req: dict[str, Any] = {"uid": "u1", "kind": {"kind": kind}, "operation": operation,
                           "namespace": "research", "object": obj, "oldObject": old}  # fmt: skip
    if sub is not None:
        req["subResource"] = sub
    body = json.dumps({"request": req}, ensure_ascii=True).encode()
    for path in ("/mutate", "/validate"):
        status, raw = _post(path, body)
        assert status in (200, 400), (path, status, raw[:300])
        if status == 200:
            assert json.loads(raw)["response"]["uid"] == "u1"


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("quotas")


@fuzz_settings(200)
@given(objs=st.lists(values, max_size=4), as_list=st.booleans())
def test_any_quota_file_is_read_or_refused_with_fixes(
    folder: Path, objs: list[Any], as_list: bool
) -> None:
    doc: Any = {"kind": "List", "items": objs} if as_list else (objs[0] if objs else {})
    path = folder / "objs.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=False))
    refused: list[Any] = []
    try:
        blocks = import_quotas(path, POLICY)
    except InvalidInput as exc:
        refused = list(exc.problems) or [None]
    else:
        assert set(blocks) == {"queues", "priorityClasses"}
    assert all(p is not None and p.fix for p in refused), refused
