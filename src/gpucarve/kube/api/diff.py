"""What applying an object would change on the cluster: the object as it is and as the API
server would make it (a server-side apply with `dryRun=All`, defaults filled in as they
would be), compared without what the server keeps for itself (managed fields, versions,
timestamps, status)."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

SERVER_KEPT = ("managedFields", "resourceVersion", "uid", "creationTimestamp", "generation")


def _kept(obj: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in obj.items() if k != "status"}
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in SERVER_KEPT}
    out["metadata"] = meta
    return out


@dataclass(frozen=True)
class Change:
    what: str  # Kind/name
    action: str  # create | change | unchanged
    diff: tuple[str, ...] = ()


def change(what: str, current: Mapping[str, Any] | None, would: Mapping[str, Any]) -> Change:
    """How `current` (None: not there) would become `would`."""
    if current is None:
        return Change(what, "create")
    before = yaml.safe_dump(_kept(current), sort_keys=True).splitlines()
    after = yaml.safe_dump(_kept(would), sort_keys=True).splitlines()
    if before == after:
        return Change(what, "unchanged")
    lines = difflib.unified_diff(before, after, "on the cluster", "after apply", lineterm="", n=2)
    return Change(what, "change", tuple(lines))
