"""A history as `simulate --trace` and `history replay` read it: the recorded lines (Unix
seconds) put on a clock that starts at the earliest arrival, with that second kept as each
line's `recorded.origin`, and a name made unique where a namespace reused it."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from gpucarve.sim.traces.recorded import parse_recorded

SINCE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400}


def since_seconds(text: str) -> int:
    """`30d`, `12h`, `90m`, `45s` as seconds; ValueError says the form."""
    text = text.strip()
    unit = SINCE_UNITS.get(text[-1:].lower())
    number = text[:-1] if unit else text
    if not number.isdigit() or len(number) > 9:
        raise ValueError(f"{text[:24]!r} is not a duration such as 30d, 12h, 90m or 45s")
    return int(number) * (unit or 1)


def rebased(lines: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The lines on a clock from their earliest arrival, oldest first."""
    docs = [dict(x) for x in lines if isinstance(x.get("submitTime"), int)]
    if not docs:
        return []
    origin = min(int(d["submitTime"]) for d in docs)
    docs.sort(key=lambda d: (d["submitTime"], str(d.get("namespace")), str(d.get("name"))))
    taken: dict[tuple[str, str], int] = {}
    out = []
    for d in docs:
        key = (str(d.get("namespace")), str(d.get("name")))
        taken[key] = taken.get(key, 0) + 1
        if taken[key] > 1:
            d["name"] = f"{key[1]}-run{taken[key]}"
        d["submitTime"] = int(d["submitTime"]) - origin
        if "recorded" in d:
            d["recorded"] = parse_recorded(d["recorded"]).shifted(origin, origin).as_doc()
        out.append(d)
    return out


def jsonl(lines: Iterable[Mapping[str, Any]]) -> str:
    return "".join(json.dumps(x, sort_keys=True, separators=(",", ":")) + "\n" for x in lines)
