"""The Helm chart's files that must not drift: its CRDs are the package's, and its default
values pass its own schema (which refuses misspelt ones)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from gpucarve.kube.api.crds import crd_manifests

CHART = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "gpucarve"


def test_the_chart_ships_the_package_crds() -> None:
    shipped = {p.name: yaml.safe_load(p.read_text()) for p in (CHART / "crds").glob("*.yaml")}
    package = {f"{m['metadata']['name']}.yaml": m for m in crd_manifests()}
    assert shipped == package


def _schema() -> dict[str, object]:
    return dict(json.loads((CHART / "values.schema.json").read_text()))


def test_the_default_values_pass_the_schema() -> None:
    jsonschema.validate(yaml.safe_load((CHART / "values.yaml").read_text()), _schema())


@pytest.mark.parametrize(
    "change",
    [{"replicaCount": "2"}, {"leaderElection": {"enable": True}}, {"healthPort": 0}],
)
def test_the_schema_refuses_wrong_values(change: dict[str, object]) -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    values.update(change)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(values, _schema())
