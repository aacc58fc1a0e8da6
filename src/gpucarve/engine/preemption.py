"""Reclaim and preemption: make room for a workload by evicting the fewest, cheapest gangs.

Least disruptive first. *Reclaim*: a queue that stays within its nominal quota takes back
capacity that other queues of its cohort borrowed, evicting only workloads of queues that are
borrowing that flavor. *Preempt*: a workload evicts lower-priority workloads of its own queue.
Victims are never non-preemptible, never younger than the minimum runtime, never terminating,
and always whole gangs. Candidates are tried cheapest first (lowest priority, then least GPU-time
lost, then newest), and the set found is then minimised by putting back every victim whose
eviction turns out unnecessary.

Why this cannot loop: a reclaimer stays within nominal, so it is never a reclaim victim; and
priority preemption only goes from higher to lower priority inside one queue.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from gpucarve.core.workload import PodAssignment, RunningWorkload, Workload
from gpucarve.engine.quota import Quotas
from gpucarve.engine.working import Working

MAX_VICTIMS = 64


Attempt = Callable[[], list[PodAssignment] | None]


def evict(ws: Working, rw: RunningWorkload) -> None:
    ws.remove_running(rw.workload.id)
    by_name = {ps.name: ps for ps in rw.workload.pod_sets}
    for pod in rw.pods:
        ps = by_name[pod.pod_set]
        node = ws.nodes[ws.node_index[pod.node]]
        ws.adjust_node(node, ps.cpu_milli, ps.memory_mib)
        if pod.flavor is not None:
            ws.give_back(ws.ordinals(pod.slice_ids), pod.shared_memory_mib)
            ws.adjust_usage(rw.workload.queue, pod.flavor, -len(pod.slice_ids))


def _holds(rw: RunningWorkload, flavors: set[str]) -> set[str]:
    return {p.flavor for p in rw.pods if p.flavor in flavors}


def _lost(ws: Working, rw: RunningWorkload, now: int) -> int:
    charge = sum(ws.flavors[p.flavor].charge * len(p.slice_ids) for p in rw.pods if p.flavor)
    return max(0, now - rw.start_time) * charge


class Preemptor:
    def __init__(self, ws: Working, quotas: Quotas, now: int, min_runtime: int) -> None:
        self.ws = ws
        self.quotas = quotas
        self.now = now
        self.min_runtime = min_runtime
        self._by_queue: dict[str, tuple[int, list[RunningWorkload]]] = {}
        self.fresh: Mapping[str, object] = {}

    def _running_of(self, queue: str) -> list[RunningWorkload]:
        """Eligible running workloads of a queue (re-listed when that queue's running set
        changes)."""
        version = self.ws.queue_version.get(queue, 0)
        hit = self._by_queue.get(queue)
        if hit is None or hit[0] != version:
            mine = self.ws.running_by_queue.get(queue, {})
            hit = self._by_queue[queue] = (
                version,
                [rw for rw in mine.values() if self._eligible(rw)],
            )
        return hit[1]

    def _eligible(self, rw: RunningWorkload) -> bool:
        w = rw.workload
        if not w.preemptible or rw.terminating:
            return False
        # Admitted earlier in this cycle: nothing ran yet, so no minimum runtime applies.
        return w.id in self.fresh or self.now - rw.start_time >= self.min_runtime

    def reclaim_candidates(self, w: Workload, demand: dict[str, int]) -> list[RunningWorkload]:
        q = self.quotas
        cohort = q.queues[w.queue].cohort
        if cohort is None:
            return []
        for flavor, d in demand.items():
            if q.used(w.queue, flavor) + d > q.nominal(w.queue, flavor):
                return []  # reclaim only serves a queue that stays within its nominal quota
        flavors = set(demand)
        out = []
        for other in q.members.get(cohort, ()):
            if other == w.queue or not any(q.borrowed(other, f) > 0 for f in flavors):
                continue
            out += [
                rw
                for rw in self._running_of(other)
                if any(q.borrowed(other, f) > 0 for f in _holds(rw, flavors))
            ]
        return self._order(out)

    def preempt_candidates(self, w: Workload, demand: dict[str, int]) -> list[RunningWorkload]:
        flavors = set(demand)
        out = [
            rw
            for rw in self._running_of(w.queue)
            if rw.workload.priority < w.priority and _holds(rw, flavors)
        ]
        return self._order(out)

    def _order(self, rws: list[RunningWorkload]) -> list[RunningWorkload]:
        return sorted(
            rws,
            key=lambda rw: (
                rw.workload.priority,
                _lost(self.ws, rw, self.now),
                -rw.start_time,
                -rw.workload.submit_time,
                rw.workload.id,
            ),
        )

    def find(
        self,
        w: Workload,
        demand: dict[str, int],
        candidates: list[RunningWorkload],
        attempt: Attempt,
    ) -> tuple[list[PodAssignment], list[RunningWorkload]] | None:
        """Evict candidates in order until `attempt` (quota check + gang placement) succeeds,
        then drop every victim that was not needed. Leaves the state with the victims evicted
        and the workload placed, or untouched when there is no solution."""
        ws = self.ws
        cp = ws.checkpoint()
        # First, whether evicting every candidate would make room: one placement, where a
        # search that fails (most do, on a busy cluster) would try one per victim.
        for rw in candidates[:MAX_VICTIMS]:
            evict(ws, rw)
        possible = (
            self.quotas.check(w.queue, demand).fits
            and self._room_may_fit(demand)
            and attempt() is not None
        )
        ws.rollback(cp)
        if not possible:
            return None
        chosen: list[RunningWorkload] = []
        flavors = set(demand)
        found = False
        for rw in candidates[:MAX_VICTIMS]:
            if rw.workload.queue != w.queue and not any(
                self.quotas.borrowed(rw.workload.queue, f) > 0 for f in _holds(rw, flavors)
            ):
                continue  # its queue stopped borrowing after earlier evictions
            evict(ws, rw)
            chosen.append(rw)
            if self.quotas.check(w.queue, demand).fits and self._room_may_fit(demand):
                inner = ws.checkpoint()
                if attempt() is not None:
                    found = True
                    ws.rollback(inner)
                    break
        ws.rollback(cp)
        if not found:
            return None
        needed = list(chosen)
        for rw in reversed(chosen):
            trial = [v for v in needed if v is not rw]
            if self._works(w, demand, trial, attempt):
                needed = trial
        for rw in needed:
            evict(ws, rw)
        placed = attempt()
        assert placed is not None, "the minimal victim set stopped working"
        return placed, needed

    def _room_may_fit(self, demand: dict[str, int]) -> bool:
        """A cheap necessary condition before trying a placement: enough free slices in
        total (for shared flavors the index counts per GPU, so it is no bound there)."""
        for flavor, d in demand.items():
            if self.ws.index[flavor].total < d and not self.ws.flavors[flavor].shared:
                return False
        return True

    def _works(
        self, w: Workload, demand: dict[str, int], victims: list[RunningWorkload], attempt: Attempt
    ) -> bool:
        ws = self.ws
        cp = ws.checkpoint()
        for rw in victims:
            evict(ws, rw)
        ok = self.quotas.check(w.queue, demand).fits and attempt() is not None
        ws.rollback(cp)
        return ok
