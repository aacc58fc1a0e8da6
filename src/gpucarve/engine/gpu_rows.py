"""Free milli-GPU per (node, GPU), and free CPU and memory per node, kept in step with the
working state for the fragmentation model (`engine.fragment`): scoring every candidate node at
once needs the cluster as arrays, and rebuilding them per pod would cost a pass over every GPU.

Whole GPUs and shared (time-slicing, MPS) GPUs are modelled: a GPU's free milli is its free
slices' share of it. A MIG GPU, or a node position without a GPU, is -1 (no GPU the model
places on): MIG placement has its own geometry and the repartitioner.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from gpucarve.core.amounts import FlavorName
from gpucarve.core.policy import SliceKind

if TYPE_CHECKING:
    from gpucarve.engine.node_state import FlavorInfo, GpuSlots, NodeState

MILLI = 1000
TOUCHED_LIMIT = 1_000_000
MODELLED = (SliceKind.WHOLE, SliceKind.TIME_SLICE, SliceKind.MPS)


class GpuRows:
    def __init__(
        self, nodes: Sequence[NodeState], flavors: Mapping[FlavorName, FlavorInfo]
    ) -> None:
        # Nodes changed, in order (with `epoch` bumped when the list is cut): a cached score
        # of many nodes is patched where they changed instead of recomputed.
        self.touched: list[int] = []
        self.epoch = 0
        self.modelled = {name for name, f in flavors.items() if f.flavor.kind in MODELLED}
        width = 1
        for node in nodes:
            for gpus in node.gpus.values():
                for gs in gpus:
                    width = max(width, gs.gpu + 1)
        self.rows: npt.NDArray[np.int64] = np.full((len(nodes), width), -1, dtype=np.int64)
        self.cpu = np.asarray([n.cpu_free for n in nodes], dtype=np.int64)
        self.mem = np.asarray([n.mem_free for n in nodes], dtype=np.int64)
        # (node, GPU) -> its slots, for the modelled flavor a node's GPU serves
        self.slots: dict[tuple[int, int], GpuSlots] = {}
        # flavor -> its nodes (indices, ascending), and whether a node has one at all
        self.nodes_of: dict[FlavorName, npt.NDArray[np.intp]] = {}
        members: dict[FlavorName, list[int]] = {}
        for node in nodes:
            for fname, gpus in node.gpus.items():
                if fname not in self.modelled:
                    continue
                members.setdefault(fname, []).append(node.idx)
                for gs in gpus:
                    self.slots[(node.idx, gs.gpu)] = gs
                    self.touch(gs)
        # flavor -> per node, whether it has the flavor (a group's nodes are filtered by it
        # in the group's size, not the flavor's node count)
        self.serves: dict[FlavorName, npt.NDArray[np.bool_]] = {}
        for fname, idx in members.items():
            self.nodes_of[fname] = np.asarray(sorted(set(idx)), dtype=np.intp)
            serves = np.zeros(len(nodes), dtype=np.bool_)
            serves[self.nodes_of[fname]] = True
            self.serves[fname] = serves
        self.width = width
        # What the fragmentation model keeps for as long as this working state lives (its
        # access classes, request types, last model): `frag_place.ModelState`.
        self.model_state: object | None = None

    def touch(self, gs: GpuSlots) -> None:
        if gs.flavor in self.modelled and gs.total:
            self.rows[gs.node, gs.gpu] = len(gs.free) * MILLI // gs.total
            self._changed(gs.node)

    def touch_node(self, node: NodeState) -> None:
        self.cpu[node.idx] = node.cpu_free
        self.mem[node.idx] = node.mem_free
        self._changed(node.idx)

    def _changed(self, node: int) -> None:
        if len(self.touched) >= TOUCHED_LIMIT:
            self.touched.clear()
            self.epoch += 1
        self.touched.append(node)
