"""The engine's mutable working copy of a snapshot, with checkpoint and rollback.

Every change goes through a method that records how to undo it, so a what-if (place this gang,
evict these victims) is tried in place and rolled back when it fails, instead of copying the
cluster. Free capacity is indexed per flavor by how much each node has free, so finding a node
for a pod does not scan the cluster.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

from gpucarve.core.amounts import FlavorName
from gpucarve.core.cluster import Allocation, ClusterState, Gpu
from gpucarve.core.policy import SliceKind
from gpucarve.core.requests import SHARED_KINDS, charge_milli, gpu_memory_of
from gpucarve.core.snapshot import Snapshot, Step
from gpucarve.core.workload import PodSet, RunningWorkload, TopologyMode
from gpucarve.engine.gpu_rows import GpuRows
from gpucarve.engine.node_state import FlavorIndex, FlavorInfo, GpuSlots, NodeState


class Working:
    def __init__(self, snapshot: Snapshot) -> None:
        policy = snapshot.policy
        cluster = snapshot.cluster
        self.policy = policy
        self.cluster = cluster
        self.flavors: dict[FlavorName, FlavorInfo] = {}
        for name, f in policy.flavors.items():
            mem = gpu_memory_of(policy, f)
            self.flavors[name] = FlavorInfo(f, mem, charge_milli(f, mem), f.kind in SHARED_KINDS)
        self.slice_ids: list[str] = sorted(cluster.slices)
        # slice id -> ordinal: a dict rather than a search of `slice_ids`, since following a
        # delta looks up every slice it frees or takes
        self.ordinal: dict[str, int] = {sid: i for i, sid in enumerate(self.slice_ids)}
        self.slice_gpu: list[GpuSlots] = [None] * len(self.slice_ids)  # type: ignore[list-item]
        keys = policy.topology_keys
        self.nodes: list[NodeState] = []
        self.node_index: dict[str, int] = {}
        self.total: dict[tuple[str, int], int] = {}
        # Most slices of a flavor one node / topology group holds (totals never change while
        # this working state lives): filled on demand by the ceilings.
        self.largest: dict[tuple[TopologyMode, str], int] = {}
        # Slices in use per (node, GPU), all flavors together.
        self.gpu_used: dict[tuple[int, int], int] = {}
        self.index: dict[str, FlavorIndex] = {f: FlavorIndex() for f in policy.flavors}
        # free slices per flavor, every GPU's counted (a shared flavor's index keeps only the
        # most free on one GPU of each node): what the idle accounting reads each cycle
        self.free_slices: dict[FlavorName, int] = dict.fromkeys(policy.flavors, 0)
        for i, n in enumerate(cluster.nodes):
            labels = dict(n.labels)
            node = NodeState(
                idx=i,
                name=n.name,
                pool=n.pool,
                labels=labels,
                taints=tuple((t.key, t.value, t.effect) for t in n.taints),
                # ints, not Bounds: the placer subtracts and compares them per pod
                cpu_free=n.cpu.or_int(),
                mem_free=n.memory.or_int(),
                rack=labels.get(keys.rack, ""),
                nvlink=labels.get(keys.nvlink_domain, ""),
                block=labels.get(keys.block, ""),
            )
            for gpu in n.gpus:
                self._index_gpu(node, gpu, cluster)
            self.nodes.append(node)
            self.node_index[n.name] = i
            for fname, gs_list in node.gpus.items():
                total = free = most = 0
                for g in gs_list:
                    total += g.total
                    free += len(g.free)
                    most = max(most, len(g.free))
                self.total[(fname, i)] = total
                self.free_slices[fname] += free
                self.index[fname].set(i, most if self.flavors[fname].shared else free)
        self.gpu_rows = GpuRows(self.nodes, self.flavors)
        # Running pods per (pod set, flavor, slices per pod, pods weighed together), for the
        # fragmentation model's demand mix; a one-node gang counts as one request of its pods.
        self.running_demand: Counter[tuple[PodSet, FlavorName | None, int, int]] = Counter()
        self.usage: dict[tuple[str, FlavorName], int] = {}
        # Bumped on every change of `usage` (and its undo): caches of derived values (a
        # queue's fair share) compare it.
        self.usage_version = 0
        # Running pods per (flavor, slices per pod), for the fragmentation score's demand mix.
        self.running_shapes: dict[tuple[FlavorName, int], int] = {}
        self.running: dict[str, RunningWorkload] = {}
        self.running_version = 0
        # the same by queue, with a version per queue: preemption scans one queue's work
        self.running_by_queue: dict[str, dict[str, RunningWorkload]] = {}
        self.queue_version: dict[str, int] = {}
        # running workloads with fewer pods than they have (elastic gangs below full size, and
        # gangs placed in part without gang scheduling): what may grow, without a pass over
        # everything that runs
        self.short: dict[str, RunningWorkload] = {}
        # workload id -> what ran under that id before the first logged change to it since the
        # last commit: what `commit` compares to bring the demand mix up to date
        self.running_before: dict[str, RunningWorkload | None] = {}
        for rw in snapshot.running:
            self._base_running(rw, +1)
        self._groups: dict[TopologyMode, list[list[int]]] = {}
        self._group_pos: dict[TopologyMode, dict[int, int]] = {}
        self.log: list[Callable[[], None]] = []
        # Bumped whenever capacity is given back, so cached "does not fit" answers expire.
        self.release_epoch = 0
        # the allocations and running workloads of the last snapshot `sync` reached, with
        # their identities: the next `sync` starts from that snapshot (a driver of rebuilt
        # views), so they are not looked up again
        self._synced_slices: tuple[Mapping[str, Allocation], dict[int, str]] | None = None
        self._synced_running: tuple[tuple[RunningWorkload, ...], dict[int, int]] | None = None

    def _index_gpu(self, node: NodeState, gpu: Gpu, cluster: ClusterState) -> None:
        """One GPU's slices, by flavor, into `node` (free ones ascending) and the per-slice
        tables: one pass over the slices, the constructor's hot loop at 20,000 nodes."""
        slices, allocations, ordinal = cluster.slices, cluster.allocations, self.ordinal
        slice_gpu, i = self.slice_gpu, node.idx
        per: dict[str, GpuSlots] = {}
        used = 0
        for sid in gpu.slice_ids:
            s = slices[sid]
            gs = per.get(s.flavor)
            if gs is None:
                gs = per[s.flavor] = GpuSlots(i, gpu.index, s.flavor, [], 0, gpu.memory_mib)
                node.gpus.setdefault(s.flavor, []).append(gs)
            o = ordinal[sid]
            gs.members.append(o)
            slice_gpu[o] = gs
            a = allocations.get(sid)
            if a is None:
                gs.free.append(o)
            else:
                used += 1
                if s.kind in SHARED_KINDS:
                    gs.mem_free -= a.memory_mib
        if used:
            self.gpu_used[(i, gpu.index)] = used
        for gs in per.values():
            gs.total = len(gs.members)
            gs.free.sort()

    def groups_for(self, topology: TopologyMode) -> list[list[int]] | None:
        """Node indices per node, NVLink domain, rack or block (by label value, sorted); None when
        the workload has no topology constraint. Labels do not change, so this is computed once."""
        if topology is TopologyMode.NONE:
            return None
        cached = self._groups.get(topology)
        if cached is None:
            by: dict[str, list[int]] = {}
            for node in self.nodes:
                if topology is TopologyMode.NODE:
                    key = node.name
                elif topology is TopologyMode.NVLINK:
                    key = node.nvlink
                elif topology is TopologyMode.BLOCK:
                    key = node.block
                else:
                    key = node.rack
                if key:
                    by.setdefault(key, []).append(node.idx)
            cached = self._groups[topology] = [by[k] for k in sorted(by)]
        return cached

    def group_positions(self, topology: TopologyMode) -> dict[int, int]:
        """Node index -> position of its group in `groups_for(topology)`."""
        cached = self._group_pos.get(topology)
        if cached is None:
            groups = self.groups_for(topology) or []
            cached = self._group_pos[topology] = {n: i for i, g in enumerate(groups) for n in g}
        return cached

    # ------------------------------------------------------------------ counting
    def _count(self, node: NodeState, flavor: FlavorName) -> int:
        gpus = node.gpus.get(flavor, ())
        if self.flavors[flavor].shared:
            return max((len(g.free) for g in gpus), default=0)
        return sum(len(g.free) for g in gpus)

    def recount(self, node: NodeState, flavor: FlavorName) -> None:
        self.index[flavor].set(node.idx, self._count(node, flavor))

    def free_count(self, node: NodeState, flavor: FlavorName) -> int:
        return self.index[flavor].count.get(node.idx, 0)

    # ------------------------------------------------------------------ undo log
    def checkpoint(self) -> int:
        return len(self.log)

    def rollback(self, checkpoint: int) -> None:
        while len(self.log) > checkpoint:
            self.log.pop()()

    def commit(self, checkpoint: int) -> None:
        """Make every change since `checkpoint` part of the base state, as if the snapshot
        they lead to had been followed: a cycle's own changes, which `Engine` keeps. The undo
        log goes; what only the base state counts (the demand mix, `_count_running`) is brought
        up to the running workloads the changes left; capacity counts as given back, as when a
        step is followed, so cached "does not fit" answers expire."""
        del self.log[checkpoint:]
        for wid, before in self.running_before.items():
            after = self.running.get(wid)
            if after is not before:
                if before is not None:
                    self._count_running(before, -1)
                if after is not None:
                    self._count_running(after, +1)
        self.running_before.clear()
        self.release_epoch += 1

    def comparable(self) -> dict[str, object]:
        """Everything a cycle reads from the working state, in a comparable form (caches and
        version counters left out: they only have to change when these do): how a state
        reached by following snapshots is checked against a fresh one."""
        gpus = [
            (
                gs.node,
                gs.gpu,
                gs.flavor,
                tuple(gs.free),
                gs.mem_free if self.flavors[f].shared else 0,
            )
            for node in self.nodes
            for f, per in sorted(node.gpus.items())
            for gs in per
        ]
        index = {
            f: (dict(sorted(ix.count.items())), {k: list(v) for k, v in ix.buckets.items() if v})
            for f, ix in self.index.items()
        }
        return {
            "gpus": gpus,
            "nodes": [(n.cpu_free, n.mem_free) for n in self.nodes],
            "index": index,
            "index_total": {f: ix.total for f, ix in self.index.items()},
            "free_slices": dict(self.free_slices),
            "gpu_used": {k: v for k, v in sorted(self.gpu_used.items()) if v},
            "usage": {k: v for k, v in sorted(self.usage.items()) if v},
            "running": sorted(self.running.items()),
            "by_queue": {
                q: sorted(m.items()) for q, m in sorted(self.running_by_queue.items()) if m
            },
            "short": sorted(self.short),
            "demand": sorted((repr(k), v) for k, v in self.running_demand.items() if v),
            "shapes": {k: v for k, v in sorted(self.running_shapes.items()) if v},
            "rows": self.gpu_rows.rows.tolist(),
            "cpu": self.gpu_rows.cpu.tolist(),
            "mem": self.gpu_rows.mem.tolist(),
        }

    # ------------------------------------------------------------------ base changes
    # These follow the cluster from one snapshot to the next and are not logged: they are
    # only called between cycles, when the log is empty.
    def sync(self, old: Snapshot, new: Snapshot) -> None:
        assert not self.log, "sync inside a cycle"
        touched: set[tuple[int, FlavorName]] = set()
        went, came = self._changed_slices(old.cluster.allocations, new.cluster.allocations)
        for sid, alloc in went:
            self._base_slice(sid, alloc.memory_mib, +1, touched)
        for sid, alloc in came:
            self._base_slice(sid, alloc.memory_mib, -1, touched)
        for node_idx, flavor in touched:
            self.recount(self.nodes[node_idx], flavor)
        if touched:
            self.release_epoch += 1
        stopped, started = self._changed_running(old.running, new.running)
        for rw in stopped:
            self._base_running(rw, -1)
        for rw in started:
            self._base_running(rw, +1)

    # Both views share most of their objects (the Kubernetes scheduler's keeps the objects of
    # unchanged gangs; the simulator's snapshots keep what they do not change), so what
    # changed is found by identity, in passes that run in C (`map(id, …)`, set differences),
    # and only what differs by identity is compared by value: an object rebuilt equal is no
    # change. A pass in Python comparing every allocation was two fifths of a scheduler's
    # engine time at 5,000 nodes. The identities of the last view are kept with it (and it
    # with them, so no id is reused while they are).

    def _changed_slices(
        self, before: Mapping[str, Allocation], after: Mapping[str, Allocation]
    ) -> tuple[list[tuple[str, Allocation]], list[tuple[str, Allocation]]]:
        """The allocations given back and those taken, by slice id (sorted: a set's order
        follows the process's string hashing); a slice held still by an equal allocation is
        in neither."""
        last = self._synced_slices
        was = last[1] if last is not None and last[0] is before else _keys_by_id(before)
        now = _keys_by_id(after)
        self._synced_slices = (after, now)
        went = sorted(was[i] for i in was.keys() - now.keys())
        came = sorted(now[i] for i in now.keys() - was.keys())
        same = {sid for sid in went if after.get(sid) == before[sid]}
        return (
            [(sid, before[sid]) for sid in went if sid not in same],
            [(sid, after[sid]) for sid in came if sid not in same],
        )

    def _changed_running(
        self, before: tuple[RunningWorkload, ...], after: tuple[RunningWorkload, ...]
    ) -> tuple[list[RunningWorkload], list[RunningWorkload]]:
        """The running workloads that stopped and those that started (a changed one is both),
        each in its view's order; one rebuilt equal is in neither."""
        last = self._synced_running
        was = last[1] if last is not None and last[0] is before else _positions(before)
        now = _positions(after)
        self._synced_running = (after, now)
        stopped = [before[k] for k in sorted(was[i] for i in was.keys() - now.keys())]
        started = [after[k] for k in sorted(now[i] for i in now.keys() - was.keys())]
        if not stopped or not started:
            return stopped, started
        old = {rw.workload.id: rw for rw in stopped}
        same = {rw.workload.id for rw in started if old.get(rw.workload.id) == rw}
        return (
            [rw for rw in stopped if rw.workload.id not in same],
            [rw for rw in started if rw.workload.id not in same],
        )

    def apply_steps(self, steps: Sequence[Step]) -> None:
        """Follow a snapshot's recorded delta: the same state `sync` reaches, in proportion
        to what changed."""
        assert not self.log, "sync inside a cycle"
        touched: set[tuple[int, FlavorName]] = set()
        for step in steps:
            for a in step.freed:
                self._base_slice(a.slice_id, a.memory_mib, +1, touched)
            for a in step.taken:
                self._base_slice(a.slice_id, a.memory_mib, -1, touched)
            for rw in step.stopped:
                self._base_running(rw, -1)
            for rw in step.started:
                self._base_running(rw, +1)
        for node_idx, flavor in touched:
            self.recount(self.nodes[node_idx], flavor)
        if touched:
            self.release_epoch += 1

    def _base_slice(
        self, sid: str, memory: int, sign: int, touched: set[tuple[int, FlavorName]]
    ) -> None:
        o = self.ordinal[sid]
        gs = self.slice_gpu[o]
        key = (gs.node, gs.gpu)
        self.gpu_used[key] = self.gpu_used.get(key, 0) - sign
        if sign > 0:
            bisect.insort(gs.free, o)
        else:
            del gs.free[bisect.bisect_left(gs.free, o)]
        self.free_slices[gs.flavor] += sign
        if self.flavors[gs.flavor].shared:
            gs.mem_free += sign * memory
        self.gpu_rows.touch(gs)
        touched.add((gs.node, gs.flavor))

    def _set_running(self, wid: str, queue: str, rw: RunningWorkload | None) -> None:
        """The one place `running` changes (with its index by queue and the versions)."""
        by = self.running_by_queue.setdefault(queue, {})
        if rw is None:
            del self.running[wid]
            del by[wid]
            self.short.pop(wid, None)
        else:
            self.running[wid] = rw
            by[wid] = rw
            if len(rw.pods) < rw.workload.pods:
                self.short[wid] = rw
            else:
                self.short.pop(wid, None)
        self.running_version += 1
        self.queue_version[queue] = self.queue_version.get(queue, 0) + 1

    def _base_running(self, rw: RunningWorkload, sign: int) -> None:
        self._set_running(rw.workload.id, rw.workload.queue, rw if sign > 0 else None)
        self._count_running(rw, sign)
        w = rw.workload
        by_name = {ps.name: ps for ps in w.pod_sets}
        usage, queue = self.usage, w.queue
        touched: set[int] = set()
        for pod in rw.pods:
            ps = by_name[pod.pod_set]
            holder = self.nodes[self.node_index[pod.node]]
            holder.cpu_free -= sign * ps.cpu_milli
            holder.mem_free -= sign * ps.memory_mib
            touched.add(holder.idx)
            if pod.flavor is not None:
                key = (queue, pod.flavor)
                usage[key] = usage.get(key, 0) + sign * len(pod.slice_ids)
        if rw.pods:
            self.usage_version += 1
        for idx in sorted(touched):
            self.gpu_rows.touch_node(self.nodes[idx])

    def _count_running(self, rw: RunningWorkload, sign: int) -> None:
        """The demand mix's counts of running pods (`running_demand`, `running_shapes`), which
        only follow the base state: a cycle's own admissions do not count in them."""
        w = rw.workload
        demand, shapes = self.running_demand, self.running_shapes
        if w.topology is TopologyMode.NODE and len(w.pod_sets) == 1 and rw.pods:
            first = rw.pods[0]
            demand[(w.pod_sets[0], first.flavor, len(first.slice_ids), len(rw.pods))] += sign
            node_pods = True
        else:
            node_pods = False
        by_name = {ps.name: ps for ps in w.pod_sets}
        for pod in rw.pods:
            n = len(pod.slice_ids)
            if not node_pods:
                demand[(by_name[pod.pod_set], pod.flavor, n, 1)] += sign
            if pod.flavor is not None:
                shape = (pod.flavor, n)
                shapes[shape] = shapes.get(shape, 0) + sign

    # ------------------------------------------------------------------ changes
    def take(self, gs: GpuSlots, n: int, shared_mem: int) -> list[int]:
        ids = gs.free[:n]
        del gs.free[:n]
        free = self.free_slices
        free[gs.flavor] -= len(ids)
        gs.mem_free -= shared_mem
        rows = self.gpu_rows
        rows.touch(gs)
        node = self.nodes[gs.node]
        used_key = (gs.node, gs.gpu)
        self.gpu_used[used_key] = self.gpu_used.get(used_key, 0) + n
        index = self.index[gs.flavor]
        shared = self.flavors[gs.flavor].shared
        # A node's count of a whole or MIG flavor is the sum over its GPUs: adjust it by n
        # instead of recounting; a shared flavor's is a maximum and is recounted.
        if shared:
            self.recount(node, gs.flavor)
        else:
            index.set(node.idx, index.count[node.idx] - n)

        def undo() -> None:
            gs.free[0:0] = ids
            free[gs.flavor] += len(ids)
            gs.mem_free += shared_mem
            rows.touch(gs)
            self.gpu_used[used_key] -= n
            if shared:
                self.recount(node, gs.flavor)
            else:
                index.set(node.idx, index.count[node.idx] + n)

        self.log.append(undo)
        return ids

    def give_back(self, ordinals: list[int], shared_mem: int) -> None:
        touched: dict[int, tuple[GpuSlots, int]] = {}
        free = self.free_slices
        for o in ordinals:
            gs = self.slice_gpu[o]
            bisect.insort(gs.free, o)
            free[gs.flavor] += 1
            self.gpu_used[(gs.node, gs.gpu)] -= 1
            seen = touched.get(id(gs))
            touched[id(gs)] = (gs, 1 if seen is None else seen[1] + 1)
        if ordinals and shared_mem:
            self.slice_gpu[ordinals[0]].mem_free += shared_mem
        for gs, n in touched.values():
            self._recounted(gs, n)
        self.release_epoch += 1

        def undo() -> None:
            for o in ordinals:
                gs = self.slice_gpu[o]
                gs.free.remove(o)
                free[gs.flavor] -= 1
                self.gpu_used[(gs.node, gs.gpu)] += 1
            if ordinals and shared_mem:
                self.slice_gpu[ordinals[0]].mem_free -= shared_mem
            for gs, n in touched.values():
                self._recounted(gs, -n)

        self.log.append(undo)

    def _recounted(self, gs: GpuSlots, n: int) -> None:
        """A node's count of `gs`'s flavor after `n` of its slices came free (or were taken
        again): a whole or MIG flavor's is the sum over its GPUs, adjusted by n rather than
        summed again; a shared flavor's is a maximum and is recounted."""
        node = self.nodes[gs.node]
        if self.flavors[gs.flavor].shared:
            self.recount(node, gs.flavor)
        else:
            index = self.index[gs.flavor]
            index.set(node.idx, index.count[node.idx] + n)
        self.gpu_rows.touch(gs)

    def adjust_node(self, node: NodeState, cpu: int, mem: int) -> None:
        node.cpu_free += cpu
        node.mem_free += mem
        rows = self.gpu_rows
        rows.touch_node(node)

        def undo() -> None:
            node.cpu_free -= cpu
            node.mem_free -= mem
            rows.touch_node(node)

        self.log.append(undo)

    def adjust_usage(self, queue: str, flavor: FlavorName, delta: int) -> None:
        key = (queue, flavor)
        self.usage[key] = self.usage.get(key, 0) + delta
        self.usage_version += 1

        def undo() -> None:
            self.usage[key] -= delta
            self.usage_version += 1

        self.log.append(undo)

    def add_running(self, rw: RunningWorkload) -> None:
        wid, queue = rw.workload.id, rw.workload.queue
        before = self.running.get(wid)
        self.running_before.setdefault(wid, before)
        self._set_running(wid, queue, rw)
        self.log.append(lambda: self._set_running(wid, queue, before))

    def remove_running(self, workload_id: str) -> RunningWorkload:
        rw = self.running[workload_id]
        queue = rw.workload.queue
        self.running_before.setdefault(workload_id, rw)
        self._set_running(workload_id, queue, None)
        self.log.append(lambda: self._set_running(workload_id, queue, rw))
        return rw

    def ordinals(self, slice_ids: tuple[str, ...]) -> list[int]:
        ordinal = self.ordinal
        return [ordinal[s] for s in slice_ids]

    def kind(self, flavor: FlavorName) -> SliceKind:
        return self.flavors[flavor].flavor.kind


def _keys_by_id(mapping: Mapping[str, Allocation]) -> dict[int, str]:
    """Each allocation's identity and its slice id. One object under two slice ids would
    hide a change from identity: refused (no view builds one)."""
    out = dict(zip(map(id, mapping.values()), mapping.keys(), strict=True))
    if len(out) != len(mapping):
        raise ValueError("one allocation object stands for two slices")
    return out


def _positions(running: tuple[RunningWorkload, ...]) -> dict[int, int]:
    """Each running workload's identity and its place in the view; a workload that appears
    twice is refused, as above."""
    out = dict(zip(map(id, running), range(len(running)), strict=True))
    if len(out) != len(running):
        raise ValueError("one running workload object appears twice in a snapshot")
    return out
