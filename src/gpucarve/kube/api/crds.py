"""gpucarve's CustomResourceDefinitions (Queue, Cohort, PodGroup), shipped with the package."""

from __future__ import annotations

from importlib import resources
from typing import Any

import yaml

from gpucarve.core.vocabulary import CRD_NAMES as NAMES


def crd_manifests() -> list[dict[str, Any]]:
    out = []
    folder = resources.files("gpucarve") / "data" / "crds"
    for name in NAMES:
        doc = yaml.safe_load((folder / f"{name}.yaml").read_text(encoding="utf-8"))
        assert isinstance(doc, dict) and doc["metadata"]["name"] == name
        out.append(doc)
    return out
