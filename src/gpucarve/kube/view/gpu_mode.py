"""The `gpucarve.io/gpu-mode` node label (the seed's `gpu-mode` per pool) and the node
selector the webhook gives a pod whose request implies one sharing mode.

gpucarve's own placement never crosses sharing modes; the label is for everything else that
reads a pod's node selector: the kubelet's admission, another scheduler a pod reaches by
mistake, a cluster autoscaler choosing which node group to grow. So the label must be on the
Node before a pod that selects it is bound there: the scheduler writes it to the nodes of each
pool (`labels_to_write`; `kube/scheduler/node_labels.py` writes them) before it places work,
and a node whose label could not be written is one the selector keeps such pods off — never a
pod the kubelet then rejects.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpucarve.core.policy import Policy, Pool
from gpucarve.core.requests import candidate_flavors
from gpucarve.core.vocabulary import MODE_LABEL
from gpucarve.core.workload import GpuKind, GpuRequest
from gpucarve.kube.view.nodes.inventory import pool_of


def implied_mode(policy: Policy, requests: Sequence[GpuRequest]) -> str | None:
    """The one sharing mode every pool that could serve all of `requests` has; None when
    the requests fit pools of several modes (a selector would then narrow what the user
    asked for) or none."""
    modes: set[str] = set()
    for request in requests:
        if request.kind is GpuKind.NONE:
            continue
        names = {f.name for f in candidate_flavors(policy, request)}
        modes |= {
            p.sharing.value for p in policy.pools if any(f.name in names for f in p.flavors())
        }
    return next(iter(modes)) if len(modes) == 1 else None


def labels_to_write(policy: Policy, nodes: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Node name -> the mode label its pool gives it, for the nodes whose label is missing or
    says another mode (a pool changed its sharing)."""
    out: dict[str, str] = {}
    for node in nodes:
        pool = pool_of(node, policy)
        if not isinstance(pool, Pool):
            continue
        labels = node["metadata"].get("labels") or {}
        if labels.get(MODE_LABEL) != pool.sharing.value:
            out[node["metadata"]["name"]] = pool.sharing.value
    return out
