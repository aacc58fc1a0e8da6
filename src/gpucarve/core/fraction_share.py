"""What each fraction on one shared GPU may use now: its request, which admission guarantees
(the requests on a GPU never add up to more than it has), plus an equal part of what no
request holds, up to its limit. A fraction alone on its GPU bursts to its limit; a neighbour
admitted beside it takes its own request out of that room, and the burst shrinks back toward
the request. The same rule serves compute (milli-GPU) and memory (MiB).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Ask:
    pod: str
    request: int
    limit: int  # at least the request (equal: it never bursts)


def allowed(asks: Sequence[Ask], capacity: int) -> dict[str, int]:
    """Pod -> what it may use of `capacity` now: water-filling of the room above the
    requests among the pods below their limits; units that do not split evenly go one each
    to the pods first by name. Requests above the capacity (never admitted so) are kept."""
    out = {a.pod: a.request for a in asks}
    room = capacity - sum(a.request for a in asks)
    active = sorted((a for a in asks if a.limit > a.request), key=lambda a: a.pod)
    while room > 0 and active:
        share = room // len(active)
        if share == 0:
            for a in active[:room]:
                out[a.pod] += 1
            break
        left = []
        for a in active:
            give = min(share, a.limit - out[a.pod])
            out[a.pod] += give
            room -= give
            if out[a.pod] < a.limit:
                left.append(a)
        active = left
    return out
