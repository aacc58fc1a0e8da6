"""How every benchmark prints its figures: one JSON object, or aligned `name: value` lines."""

from __future__ import annotations

import json
from collections.abc import Mapping


def print_figures(figures: Mapping[str, object], as_json: bool) -> None:
    if as_json:
        print(json.dumps(dict(figures), sort_keys=True))
        return
    width = max(len(k) for k in figures)
    for key, value in figures.items():
        print(f"{key:>{width}}: {value}")
