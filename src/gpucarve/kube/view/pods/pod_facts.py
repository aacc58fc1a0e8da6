"""What the view reads of each pod, worked out once per version of the pod.

The informer replaces a pod's object whenever a watch event changes it and never edits one in
place, so an object seen in the last cycle is the same pod version: its key, gang, assignment
and start time are taken from the memo instead of being parsed again. Only the pods the watch
changed since the last cycle are looked at afresh, which at 10,000 bound pods was most of the
time a cycle spent building its view. The memo keeps the objects of the current cycle only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpucarve.kube.view.pods.assigned import Assigned, assigned_of
from gpucarve.kube.view.pods.owner_kinds import group_of
from gpucarve.kube.view.pods.pods import seconds_from


@dataclass(frozen=True, slots=True)
class PodFacts:
    key: str  # namespace/name
    group: tuple[str, str]  # (namespace, pod group), or the pod itself without one
    assigned: Assigned | None  # the assignment annotation of a bound pod
    # seconds after the epoch (before it: negative): status.startTime, else the creation time;
    # a pod that ran before the scheduler (re)started keeps its minimum runtime served
    started: int
    # the gang size the pod's own labels give (a LeaderWorkerSet's group size), if any
    hint: int | None = None


class PodFactsMemo:
    def __init__(self, epoch: datetime) -> None:
        self.epoch = epoch
        # id(pod) -> (pod, facts); the object is kept so that its id cannot be reused meanwhile
        self._last: dict[int, tuple[Mapping[str, Any], PodFacts]] = {}
        self._now: dict[int, tuple[Mapping[str, Any], PodFacts]] = {}

    def of(self, pod: Mapping[str, Any]) -> PodFacts:
        i = id(pod)
        hit = self._now.get(i)
        if hit is not None and hit[0] is pod:
            return hit[1]  # asked again in the same cycle
        hit = self._last.get(i)
        if hit is not None and hit[0] is pod:
            facts = hit[1]
        else:
            meta = pod["metadata"]
            stamp = (pod.get("status") or {}).get("startTime") or meta["creationTimestamp"]
            found = group_of(meta, spec=pod.get("spec"))
            facts = PodFacts(
                f"{meta['namespace']}/{meta['name']}",
                (meta["namespace"], meta["name"] if found is None else found[0]),
                assigned_of(pod),
                seconds_from(stamp, self.epoch),
                None if found is None else found[1],
            )
        self._now[i] = (pod, facts)
        return facts

    def group(self, pod: Mapping[str, Any]) -> tuple[str, str]:
        return self.of(pod).group

    def roll(self) -> None:
        """End of a cycle: what was not seen in it is forgotten."""
        self._last, self._now = self._now, {}


def gpu_requests(pod: Mapping[str, Any]) -> dict[str, int]:
    """The pod's `nvidia.com/*` limits, summed over its containers."""
    out: dict[str, int] = {}
    for c in (pod.get("spec") or {}).get("containers") or []:
        for name, value in ((c.get("resources") or {}).get("limits") or {}).items():
            if str(name).startswith("nvidia.com/"):
                try:
                    out[name] = out.get(name, 0) + int(value)
                except (TypeError, ValueError):
                    continue
    return out
