"""Least privilege, shown: the scheduler runs its whole job as the chart's ServiceAccount (a
TokenRequest token on the RBAC-enabled API server) and uses every verb the chart grants and
nothing else; then each granted verb is taken away in turn, and the call it covers is refused
with 403 Forbidden."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.integration.chart import render
from tests.integration.rbac_scenario import Triple, granted, rbac_triple, run, without
from tests.paths import BUILTIN

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def chart_objs() -> list[dict[str, Any]]:
    # the webhook's and the node agent's accounts are proven by their own tests
    values = ["webhook.enabled=false", "nodeAgent.enabled=false"]
    return render(BUILTIN / "three-teams.yaml", values)


def test_paths_are_named_as_rbac_names_them() -> None:
    assert rbac_triple("GET", "/api/v1/pods") == ("list", "", "pods")
    assert rbac_triple("POST", "/api/v1/namespaces/a/pods/p/binding") == (
        "create", "", "pods/binding")  # fmt: skip
    assert rbac_triple("GET", "/apis/coordination.k8s.io/v1/namespaces/n/leases/l") == (
        "get", "coordination.k8s.io", "leases")  # fmt: skip
    assert rbac_triple("PATCH", "/apis/gpucarve.io/v1alpha1/queues/q/status") == (
        "patch", "gpucarve.io", "queues/status")  # fmt: skip
    assert rbac_triple("GET", "/version") is None


def test_the_scenario_uses_every_granted_verb_and_nothing_more(
    tmp_path: Path, chart_objs: list[dict[str, Any]]
) -> None:
    recording = run(tmp_path, chart_objs, None)
    assert recording.refused() == []
    assert recording.used() == granted(chart_objs)


def test_without_any_one_grant_its_call_is_forbidden(
    tmp_path: Path, chart_objs: list[dict[str, Any]]
) -> None:
    # one test over every grant (not parametrized: the grants come from `helm template`,
    # which must not run when tests are only collected)
    grants = sorted(granted(chart_objs))
    assert len(grants) >= 15
    not_refused: list[Triple] = []
    for i, triple in enumerate(grants):
        recording = run(tmp_path / str(i), without(chart_objs, triple), triple)
        if not recording.refused(triple):
            not_refused.append(triple)
    assert not_refused == [], f"nothing was refused without {not_refused}"
