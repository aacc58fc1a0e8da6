"""Free slices the view holds out of placement, GPU by GPU: those a MIG change in flight is
creating (held by it, as in the simulator, so the engine neither places on them nor plans those
GPUs again, and counts them as arriving supply) and those of GPUs the health agent took out of
service (pods already there keep theirs; the node's other GPUs stay open). One pass over the
slices for both."""

from __future__ import annotations

from collections.abc import Mapping

from gpucarve.core.cluster import OUT_OF_SERVICE, RECONFIGURING, Allocation, Slice
from gpucarve.kube.view.nodes.inventory import Inventory

UNHEALTHY = OUT_OF_SERVICE


def holders(inventory: Inventory) -> dict[str, str]:
    """GPU (`node/gpuN`) -> the owner its free slices are held for."""
    out = {gpu: f"{UNHEALTHY}{gpu}" for gpu in inventory.unhealthy}
    for node, change in inventory.changes.items():
        for g in change.gpus:
            out[f"{node}/gpu{g}"] = f"{RECONFIGURING}{node}/gpu{g}"  # a change outranks health
    return out


def hold_free(
    slices: Mapping[str, Slice], allocs: dict[str, Allocation], inventory: Inventory
) -> None:
    held = holders(inventory)
    if not held:
        return
    for sid, s in slices.items():
        owner = held.get(f"{s.node}/gpu{s.gpu}")
        if owner is not None and sid not in allocs:
            allocs[sid] = Allocation(sid, owner, s.compute_milli, s.memory_mib)
