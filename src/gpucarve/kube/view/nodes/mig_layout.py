"""What a node of a dynamic MIG pool carries about its layout, and the mig-parted
configurations gpucarve names for it.

Two node annotations, both written only by gpucarve:

- `gpucarve.io/mig-layout`: the layout the node's GPUs have, per GPU index (`"3g.40gb@4"`
  instances), the mig-parted configuration that made it and when each GPU last changed. Absent:
  the pool's layouts from the policy.
- `gpucarve.io/mig-change`: a change in flight: the configuration asked for, the new layout,
  the GPUs it changes, when it started and whether gpucarve cordoned the node for it. Kept on
  the node, not in the scheduler's memory, so a restarted or newly elected scheduler carries on.

A node layout's configuration is named `gpucarve-<pool>-<hash>` after its profile counts per
GPU, so nodes with the same layout share one entry. mig-parted's configurations carry counts,
not placements: the placements gpucarve records are its own model of the GPU (the device plugin
publishes counts too, which is what the inventory checks).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpucarve.core.amounts import ProfileName
from gpucarve.core.mig import Instance, placement_problems
from gpucarve.core.policy import Pool
from gpucarve.core.vocabulary import MIG_CHANGE_ANNOTATION as CHANGE_ANNOTATION
from gpucarve.core.vocabulary import MIG_LAYOUT_ANNOTATION as LAYOUT_ANNOTATION

CONFIG_LABEL = "nvidia.com/mig.config"
STATE_LABEL = "nvidia.com/mig.config.state"

Layouts = tuple[tuple[Instance, ...], ...]  # per GPU index


@dataclass(frozen=True)
class NodeLayout:
    layouts: Layouts
    config: str | None
    changed_at: Mapping[int, str]  # GPU index -> RFC 3339 time of its last change


@dataclass(frozen=True)
class Change:
    config: str
    layouts: Layouts  # the whole node's layout once done
    gpus: tuple[int, ...]  # the GPU indices it changes
    started: str  # RFC 3339
    cordoned: bool  # gpucarve cordoned the node for it (and uncordons it after)
    reason: str

    def to_json(self) -> str:
        return json.dumps(
            {
                "config": self.config,
                "gpus": list(self.gpus),
                "layout": encode_layouts(self.layouts),
                "started": self.started,
                "cordoned": self.cordoned,
                "reason": self.reason,
            },
            sort_keys=True,
        )


def encode_layouts(layouts: Layouts) -> dict[str, list[str]]:
    return {str(g): [i.describe() for i in layout] for g, layout in enumerate(layouts)}


def _decode(raw: Any, pool: Pool) -> Layouts:
    geom = pool.model.mig
    if geom is None or not isinstance(raw, dict):
        raise ValueError("expected an object of GPU index -> instances")
    out: list[tuple[Instance, ...]] = []
    for g in range(pool.gpus_per_node):
        items = raw.get(str(g))
        if not isinstance(items, list):
            raise ValueError(f"GPU {g} has no layout")
        layout = []
        for item in items:
            profile, _, start = str(item).partition("@")
            if geom.profile(profile) is None or not start.isdigit():
                raise ValueError(f"GPU {g}: {item!r} is not <profile>@<start> of {pool.model.id}")
            layout.append(Instance(int(start), ProfileName(profile)))
        problems = placement_problems(geom, layout)
        if problems:
            raise ValueError(f"GPU {g}: " + "; ".join(problems))
        out.append(tuple(sorted(layout)))
    return tuple(out)


def node_layout(annotations: Mapping[str, str], pool: Pool) -> NodeLayout:
    """The node's current layout; `ValueError` (with why) when the annotation is unusable."""
    raw = annotations.get(LAYOUT_ANNOTATION)
    if raw is None:
        return NodeLayout(tuple(pool.mig_layouts), None, {})
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as err:
        raise ValueError(f"{LAYOUT_ANNOTATION} is not JSON: {err}") from err
    if not isinstance(doc, dict):
        raise ValueError(f"{LAYOUT_ANNOTATION} is not a JSON object")
    changed = doc.get("changedAt") or {}
    return NodeLayout(
        _decode(doc.get("layout"), pool),
        doc.get("config"),
        {int(k): str(v) for k, v in changed.items()},
    )


def layout_annotation(layout: NodeLayout) -> str:
    return json.dumps(
        {
            "config": layout.config,
            "layout": encode_layouts(layout.layouts),
            "changedAt": {str(k): v for k, v in sorted(layout.changed_at.items())},
        },
        sort_keys=True,
    )


def node_change(annotations: Mapping[str, str], pool: Pool) -> Change | None:
    raw = annotations.get(CHANGE_ANNOTATION)
    if raw is None:
        return None
    try:
        doc = json.loads(raw)
        return Change(
            str(doc["config"]),
            _decode(doc["layout"], pool),
            tuple(int(g) for g in doc["gpus"]),
            str(doc["started"]),
            bool(doc["cordoned"]),
            str(doc.get("reason", "")),
        )
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
        raise ValueError(f"{CHANGE_ANNOTATION} is unusable: {err}") from err


def counts(layout: Sequence[Instance]) -> dict[str, int]:
    return dict(sorted(Counter(i.profile for i in layout).items()))


def config_for(pool: Pool, layouts: Layouts) -> tuple[str, list[dict[str, Any]]]:
    """The mig-parted configuration (name, entries) that carves a node of `pool` so."""
    per_gpu = [counts(layout) for layout in layouts]
    digest = hashlib.sha256(json.dumps(per_gpu, sort_keys=True).encode()).hexdigest()[:10]
    base: dict[str, Any] = {}
    if pool.model.pci_device_ids:
        base["device-filter"] = list(pool.model.pci_device_ids)
    if all(c == per_gpu[0] for c in per_gpu):
        entries = [{**base, "devices": "all", "mig-enabled": True, "mig-devices": per_gpu[0]}]
    else:
        entries = [
            {**base, "devices": [g], "mig-enabled": True, "mig-devices": c}
            for g, c in enumerate(per_gpu)
        ]
    return f"gpucarve-{pool.name}-{digest}", entries
