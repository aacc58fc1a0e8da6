"""The small dynamic MIG policy the Kubernetes tests share: one node of two A100-80GB, each
carved as one 7g.80gb, which may be repartitioned into 1g.10gb instances."""

from __future__ import annotations

import copy
from typing import Any

_DOC: dict[str, Any] = {
    "apiVersion": "gpucarve.io/v1alpha1",
    "kind": "Policy",
    "metadata": {"name": "dynamic-mig"},
    "pools": [
        {
            "name": "inf",
            "gpuModel": "A100-80GB",
            "nodes": 1,
            "gpusPerNode": 2,
            "sharing": "mig",
            "mig": {
                "layout": {"7g.80gb": 1},
                "dynamic": {"minSecondsBetweenChanges": 600, "profiles": ["1g.10gb"]},
            },
        }
    ],
    "queues": [
        {
            "name": "serving",
            "namespaces": ["serving"],
            "quota": {"a100-mig-7g.80gb": {"nominal": 2}, "a100-mig-1g.10gb": {"nominal": 14}},
        }
    ],
}


def dynamic_mig_doc() -> dict[str, Any]:
    return copy.deepcopy(_DOC)
