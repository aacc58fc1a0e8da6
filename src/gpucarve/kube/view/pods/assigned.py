"""Where gpucarve bound a pod: the `gpucarve.io/assignment` annotation it writes at binding
(node, slices, memory promised on a shared GPU), parsed once per distinct value."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpucarve.core.cluster import gpu_of_slice
from gpucarve.core.vocabulary import ASSIGNMENT_ANNOTATION as ASSIGNMENT
from gpucarve.core.workload import PodAssignment


@dataclass(frozen=True)
class Assigned:
    """Where a pod was bound: its node, slices and the memory promised on a shared GPU; for a
    binding made this cycle also the GPUs' indices and the fraction the engine placed, so the
    binder and the device config read them from the decision, never from the pod again."""

    node: str
    slices: tuple[str, ...]
    shared_memory_mib: int = 0
    gpus: tuple[int, ...] = ()
    fraction_milli: int = 0
    # the queue the pod was admitted under: it is charged there for as long as it runs,
    # whatever its labels say later ("": an assignment written before queues were recorded)
    queue: str = ""
    # a bursting fraction's limits (0: none above the request), and whether its GPU is
    # shared through MPS (whose per-client limits then carry them), for the device config
    fraction_limit_milli: int = 0
    memory_limit_mib: int = 0
    mps: bool = False

    @classmethod
    def placed(
        cls,
        pod: PodAssignment,
        fraction_milli: int,
        queue: str = "",
        limits: tuple[int, int] = (0, 0),
        mps: bool = False,
    ) -> Assigned:
        """`limits`: the fraction's compute (milli-GPU) and memory (MiB) limits."""
        gpus = dict.fromkeys(g for s in pod.slice_ids if (g := gpu_of_slice(s)) is not None)
        return cls(
            pod.node, pod.slice_ids, pod.shared_memory_mib, tuple(gpus), fraction_milli, queue,
            limits[0], limits[1], mps,
        )  # fmt: skip

    def annotation(self) -> str:
        doc: dict[str, Any] = {
            "slices": list(self.slices),
            "sharedMemoryMiB": self.shared_memory_mib,
        }
        if self.queue:
            doc["queue"] = self.queue
        return json.dumps(doc, separators=(",", ":"))


_PARSED: dict[tuple[str, str], Assigned | None] = {}


def assigned_of(pod: Mapping[str, Any]) -> Assigned | None:
    raw = (pod["metadata"].get("annotations") or {}).get(ASSIGNMENT)
    node = (pod.get("spec") or {}).get("nodeName")
    if not raw or not node:
        return None
    memo = (str(node), str(raw))
    if memo in _PARSED:
        return _PARSED[memo]
    if len(_PARSED) > 200_000:
        _PARSED.clear()
    _PARSED[memo] = parsed = _parse_assigned(*memo)
    return parsed


def _parse_assigned(node: str, raw: str) -> Assigned | None:
    try:
        doc = json.loads(raw)
        queue = doc.get("queue", "")
        return Assigned(
            str(node),
            tuple(str(s) for s in doc["slices"]),
            int(doc.get("sharedMemoryMiB", 0)),
            queue=queue if isinstance(queue, str) else "",
        )
    except (ValueError, KeyError, TypeError):
        return None
