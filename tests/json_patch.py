"""A JSON patch (RFC 6902) applied as the API server applies an admission webhook's: the add
and remove operations, all the webhook emits."""

from __future__ import annotations

import copy
from typing import Any


def apply_patch(obj: Any, patch: list[dict[str, Any]]) -> Any:
    out = copy.deepcopy(obj)
    for op in patch:
        *parents, last = [
            p.replace("~1", "/").replace("~0", "~") for p in op["path"][1:].split("/")
        ]
        node = out
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if op["op"] == "remove":
            del node[last]
        elif isinstance(node, list):
            node.append(op["value"]) if last == "-" else node.insert(int(last), op["value"])
        else:
            node[last] = op["value"]
    return out
