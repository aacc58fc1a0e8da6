"""Gangs running short whose missing pods do not exist (yet): the API objects do not say since
when, so the scheduler counts from the cycle it first saw each one short (a restart counts
again: a later release, never an early one) and gives the engine that time in
`Snapshot.partial`, where the gang timeout reads it."""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

from gpucarve.core.snapshot import Snapshot
from gpucarve.kube.view.cluster_view import View


class ShortGangs:
    def __init__(self) -> None:
        self.seen: dict[str, int] = {}  # workload -> the cycle's time it was first seen short

    def dated(self, view: View, snapshot: Snapshot, now: int) -> Snapshot:
        self.seen = {w: t for w, t in self.seen.items() if w in view.short_running}
        if not view.short_running:
            return snapshot
        partial = dict(snapshot.partial)
        for wid, part in view.short_running.items():
            partial[wid] = dataclasses.replace(part, since=self.seen.setdefault(wid, now))
        return dataclasses.replace(snapshot, partial=MappingProxyType(partial))
