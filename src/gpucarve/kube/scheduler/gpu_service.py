"""The scheduler's side of GPU health: which of the agents' faults are out of service.

The inventory decides, pool by pool within `gpuHealth.maxOutOfService`
(`core/gpu_faults.out_of_service`); here the answer is written back onto each Node
(`gpucarve.io/gpus-out-of-service`: GPU index -> fault class) for its agent to remediate,
only where it changed, with an Event on the Node when a GPU is taken out of service and, once
per fault, when a fault is left in service because the pool's budget is spent.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpucarve.core.gpu_faults import Fault
from gpucarve.core.vocabulary import OUT_OF_SERVICE_ANNOTATION
from gpucarve.kube.api.client import ApiError, Client
from gpucarve.kube.api.events import post_event
from gpucarve.kube.scheduler.reporter import Reporter

log = logging.getLogger("gpucarve.scheduler")


def _by_node(faults: Mapping[str, Fault]) -> dict[str, dict[int, Fault]]:
    out: dict[str, dict[int, Fault]] = {}
    for gpu, f in faults.items():
        node, _, g = gpu.rpartition("/")
        out.setdefault(node, {})[int(g.removeprefix("gpu"))] = f
    return out


@dataclass(frozen=True, slots=True)
class Changes:
    """What changed since the last cycle: GPUs reset by their agents, and GPUs back in
    service with how long they were out (seconds)."""

    reset: tuple[Fault, ...] = ()
    returned: tuple[tuple[Fault, int], ...] = ()


class GpuService:
    def __init__(self, client: Client, reporter: Reporter) -> None:
        self.client, self.reporter = client, reporter
        self.held_told: set[tuple[str, int]] = set()  # (GPU, since) told past the budget
        self.seen: dict[str, Fault] = {}  # last cycle's GPUs out of service
        self.marked: set[str] | None = None  # nodes with an answer on them; None: unread

    def changes(self, out: Mapping[str, Fault], held: Mapping[str, Fault]) -> Changes:
        now = int(self.reporter.clock().timestamp())
        reset = tuple(
            f for gpu, f in sorted(out.items())
            if f.reset and not (gpu in self.seen and self.seen[gpu].reset)
        )  # fmt: skip
        returned = tuple(
            (f, max(0, now - f.since)) for gpu, f in sorted(self.seen.items())
            if gpu not in out and gpu not in held
        )  # fmt: skip
        self.seen = dict(out)
        return Changes(reset, returned)

    def _event(self, node: str, kind: str, reason: str, message: str) -> None:
        involved = {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node}
        post_event(self.client, involved, kind, reason, message, self.reporter.clock())

    def handle(
        self,
        nodes: Callable[[], Iterable[Mapping[str, Any]]],
        node: Callable[[str], Mapping[str, Any] | None],
        out: Mapping[str, Fault],
        held: Mapping[str, Fault],
    ) -> Changes:
        """Write the answer onto the Nodes; what changed since the last cycle. `nodes` lists
        them all (read once, for the answers an earlier leader left), `node` reads one: a
        cycle looks at the nodes with a GPU out of service now or before, not at every node."""
        want = _by_node(out)
        if self.marked is None:
            self.marked = {
                n["metadata"]["name"] for n in nodes()
                if OUT_OF_SERVICE_ANNOTATION in (n["metadata"].get("annotations") or {})
            }  # fmt: skip
        for name in sorted(set(want) | self.marked):
            found = node(name)
            if found is None:
                self.marked.discard(name)
                continue
            self._write(name, found, want.get(name, {}))
        self._tell_held(held)
        return self.changes(out, held)

    def _write(self, name: str, node: Mapping[str, Any], gpus: Mapping[int, Fault]) -> None:
        assert self.marked is not None
        raw = (node["metadata"].get("annotations") or {}).get(OUT_OF_SERVICE_ANNOTATION)
        value = (
            json.dumps({str(g): f.fault_class for g, f in sorted(gpus.items())}, sort_keys=True)
            if gpus else None
        )  # fmt: skip
        if raw != value:
            try:
                before = {int(k) for k in json.loads(raw)} if raw else set()
            except (ValueError, TypeError):
                before = set()
            patch = {"metadata": {"annotations": {OUT_OF_SERVICE_ANNOTATION: value}}}
            try:
                self.client.call("PATCH", f"/api/v1/nodes/{name}", patch,
                                 "application/merge-patch+json")  # fmt: skip
            except ApiError as err:
                log.warning("node %s: GPUs out of service not written: %s", name, err)
                return
            for g, f in sorted(gpus.items()):
                if g not in before:
                    self._event(
                        name, "Warning", "GPUOutOfService",
                        f"GPU {g} out of service ({f.fault_class}: {f.reason}); nothing new "
                        "is placed on it",
                    )  # fmt: skip
        if value is None:
            self.marked.discard(name)
        else:
            self.marked.add(name)

    def _tell_held(self, held: Mapping[str, Fault]) -> None:
        now = {(gpu, f.since) for gpu, f in held.items()}
        self.held_told &= now
        for gpu, f in sorted(held.items()):
            if (gpu, f.since) in self.held_told:
                continue
            self.held_told.add((gpu, f.since))
            node, _, g = gpu.rpartition("/")
            message = (
                f"GPU {g.removeprefix('gpu')} is faulty ({f.fault_class}: {f.reason}) but left "
                "in service: its pool's gpuHealth.maxOutOfService is spent"
            )
            log.warning("node %s: %s", node, message)
            self._event(node, "Warning", "GPUFaultPastBudget", message)
