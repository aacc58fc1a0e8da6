"""What one cycle decided, handed to whoever watches the scheduler (the dashboard): the
snapshot the engine decided on and its result, with what the view knows beside them (GPUs out
of service, MIG changes in flight, the real pods behind the engine's workloads). Built from
values the cycle made anyway, never a second read of the API server."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from gpucarve.core.policy import Policy
from gpucarve.core.snapshot import Snapshot
from gpucarve.engine.decisions import CycleResult

log = logging.getLogger("gpucarve.scheduler")


@dataclass(frozen=True)
class CycleSeen:
    policy: Policy
    snapshot: Snapshot
    result: CycleResult
    at: datetime  # the wall clock, for people; decisions count `result.now`
    # `node/gpuN` -> why the scheduler took it out of service for its agent's fault
    unhealthy: Mapping[str, str] = field(default_factory=dict)
    # `node/gpuN` of the MIG changes in flight
    reconfiguring: frozenset[str] = frozenset()
    # workload -> the real pods of each of its pod sets (pending) or its bound pods (running)
    pending_pods: Mapping[str, tuple[tuple[str, ...], ...]] = field(default_factory=dict)
    running_pods: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # `node/gpuN` -> why: faulty GPUs left in service, their pool's budget spent
    past_budget: Mapping[str, str] = field(default_factory=dict)


Observer = Callable[[CycleSeen], None]


def tell(observers: list[Observer], seen: CycleSeen) -> None:
    """Each observer in turn; one that fails is logged and never stops the scheduler."""
    for observe in observers:
        try:
            observe(seen)
        except Exception:  # an observer's bug must not stop scheduling
            log.exception("a cycle observer failed")
