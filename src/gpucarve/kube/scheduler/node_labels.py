"""Writes the `gpucarve.io/gpu-mode` label the view says each pool's nodes lack
(`kube/view/gpu_mode.py`), before the cycle places work on them."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from gpucarve.core.policy import Policy
from gpucarve.core.vocabulary import MODE_LABEL
from gpucarve.kube.api.client import ApiError, Client
from gpucarve.kube.view.gpu_mode import labels_to_write

log = logging.getLogger(__name__)


def label_nodes(
    client: Client, policy: Policy, nodes: Sequence[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    """Write the missing mode labels; `nodes` as they are now (with the labels that were
    written, before the informer shows them), so placement and the kubelet agree."""
    todo = labels_to_write(policy, nodes)
    if not todo:
        return list(nodes)
    out: list[Mapping[str, Any]] = []
    for node in nodes:
        name = node["metadata"]["name"]
        if name not in todo:
            out.append(node)
            continue
        body = {"metadata": {"labels": {MODE_LABEL: todo[name]}}}
        try:
            client.call("PATCH", f"/api/v1/nodes/{name}", body, "application/merge-patch+json")
        except ApiError as err:
            log.warning("node %s: label %s=%s not written: %s", name, MODE_LABEL, todo[name], err)
            out.append(node)
            continue
        meta = node["metadata"]
        labels = {**(meta.get("labels") or {}), MODE_LABEL: todo[name]}
        out.append({**node, "metadata": {**meta, "labels": labels}})
    return out
