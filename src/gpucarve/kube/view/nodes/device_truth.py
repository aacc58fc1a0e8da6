"""The devices pods really got, as the node agent reads them from the kubelet's PodResources
API (`agent/pod_devices.py`), and the scheduler's picture brought into line with them.

gpucarve writes the slices it chose into `gpucarve.io/assignment`, but on a real node the
kubelet and the device plugin pick the device. The agent writes what they picked onto the
Node (`gpucarve.io/pod-devices`: pod -> its device units on the node, `gpuN` for a whole or a
shared GPU — once per time-slicing or MPS replica — and `gpuN/<profile>@<start>` for a MIG
instance, `gpuN/<profile>` where NVML could not give the placement). The view claims those
first: the real device wins, the slice the scheduler had assumed is freed (another pod that
was thought to hold it is given free slices of its kind), and each disagreement is reported
once. Dynamic MIG never changes a GPU the kubelet reports in use.

The agent also says which GPUs are faulty (`gpucarve.io/unhealthy-gpus`), read here by
`fault_entries`, and the scheduler which of them it took out of service
(`gpucarve.io/gpus-out-of-service`), read by `out_of_service_gpus`.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpucarve.core.cluster import RECONFIGURING, ClusterState, Slice
from gpucarve.core.gpu_faults import Action
from gpucarve.core.policy import SliceKind
from gpucarve.core.vocabulary import OUT_OF_SERVICE_ANNOTATION, UNHEALTHY_ANNOTATION
from gpucarve.core.vocabulary import POD_DEVICES_ANNOTATION as POD_DEVICES

MAX_UNITS = 64  # per pod: more than any node has GPUs and instances


@dataclass(frozen=True, slots=True)
class FaultEntry:
    """One GPU's fault as the agent wrote it onto the Node."""

    reason: str
    fault_class: str
    action: Action
    since: int  # Unix seconds
    boot: str  # the node's boot id when the agent wrote it
    reset: bool = False


def boot_id(node: Mapping[str, Any]) -> str:
    return str(((node.get("status") or {}).get("nodeInfo") or {}).get("bootID") or "")


def _entry(raw: Any, boot: str) -> FaultEntry:
    if isinstance(raw, str):  # an agent before fault classes wrote the reason alone
        return FaultEntry(raw, "other-xid", Action.RESET, 0, boot)
    action = str(raw.get("action", "reset"))
    return FaultEntry(
        str(raw["reason"]),
        str(raw.get("class", "other-xid")),
        Action(action) if action in Action.__members__.values() else Action.RESET,
        int(raw.get("since", 0)),
        str(raw.get("boot", boot)),
        bool(raw.get("reset", False)),
    )


def fault_entries(node: Mapping[str, Any], boot: str | None = None) -> dict[int, FaultEntry]:
    """GPU index -> its fault, from the Node's annotation (an unreadable one reads as none,
    and is rewritten by the agent)."""
    raw = (node["metadata"].get("annotations") or {}).get(UNHEALTHY_ANNOTATION)
    if not raw:
        return {}
    at = boot_id(node) if boot is None else boot
    try:
        doc = json.loads(raw)
        return {int(k): _entry(v, at) for k, v in doc.items()}
    except (ValueError, AttributeError, TypeError, KeyError):
        return {}


def out_of_service_gpus(node: Mapping[str, Any]) -> set[int]:
    """The GPUs of the node the scheduler took out of service (its annotation)."""
    raw = (node["metadata"].get("annotations") or {}).get(OUT_OF_SERVICE_ANNOTATION)
    if not raw:
        return set()
    try:
        return {int(k) for k in json.loads(raw)}
    except (ValueError, AttributeError, TypeError):
        return set()


def pod_devices(node: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    """Pod (namespace/name) -> its device units, from the Node's annotation (an unreadable
    one reads as nothing: the scheduler then keeps its own picture)."""
    raw = (node["metadata"].get("annotations") or {}).get(POD_DEVICES)
    if not raw:
        return {}
    try:
        doc = json.loads(raw)
        return {
            str(pod): tuple(str(u) for u in units[:MAX_UNITS])
            for pod, units in doc.items()
            if isinstance(units, list)
        }
    except (ValueError, AttributeError, TypeError):
        return {}


def gpus_in_use(reported: Mapping[str, tuple[str, tuple[str, ...]]]) -> set[str]:
    """`node/gpuN` of every GPU the kubelet reports a device of in use."""
    return {f"{node}/{u.split('/', 1)[0]}" for node, units in reported.values() for u in units}


def _on_gpu(cluster: ClusterState, node: str, gpu: str) -> list[Slice]:
    try:
        n = cluster.node(node)
    except KeyError:
        return []
    index = gpu.removeprefix("gpu")
    return [cluster.slices[s] for g in n.gpus if str(g.index) == index for s in g.slice_ids]


def resolve(
    cluster: ClusterState, node: str, units: Sequence[str], assumed: Sequence[str]
) -> tuple[str, ...] | None:
    """The slice ids the units name on `node`; where a unit leaves a choice (a replica of a
    shared GPU, a MIG instance without its placement) the assumed slices first. None if a
    unit names nothing there."""
    chosen: list[str] = []
    for (gpu, _, rest), count in sorted(Counter(u.partition("/") for u in units).items()):
        slices = _on_gpu(cluster, node, gpu)
        if rest and "@" in rest:
            sid = f"{node}/{gpu}/{rest}"
            if sid not in cluster.slices or count != 1:
                return None
            chosen.append(sid)
            continue
        if rest:  # a MIG instance of this profile, placement unknown
            fit = [s for s in slices if s.kind is SliceKind.MIG and s.profile == rest]
        else:  # the GPU itself, or `count` of its replicas
            fit = [s for s in slices if s.kind is not SliceKind.MIG]
        fit.sort(key=lambda s: (s.id not in assumed, s.id))
        if len(fit) < count:
            return None
        chosen += [s.id for s in fit[:count]]
    return tuple(sorted(chosen))


def busy_gpus(
    cluster: ClusterState,
    assumed: Sequence[str],
    reported: Mapping[str, tuple[str, tuple[str, ...]]],
) -> set[str]:
    """`node/gpuN` of every GPU dynamic MIG must leave alone: a slice held by a pod (bound, or
    assumed by this process before the watch shows it) or a device the kubelet reports in
    use, whatever the view made of the report."""
    held = [sid for sid, a in cluster.allocations.items() if not a.owner.startswith(RECONFIGURING)]
    busy = {
        f"{cluster.slices[s].node}/gpu{cluster.slices[s].gpu}"
        for s in (*held, *assumed)
        if s in cluster.slices
    }
    return busy | gpus_in_use(reported)
