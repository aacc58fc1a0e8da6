"""Reclaim and preemption: make room for a workload by evicting the fewest, cheapest gangs.

Least disruptive first. *Reclaim*: a queue that stays within its nominal quota takes back
capacity that other queues of its cohort borrowed, evicting only workloads of queues that are
borrowing that flavor. *Preempt*: a workload evicts lower-priority workloads of its own queue.
Victims are never non-preemptible, never younger than the minimum runtime, never terminating,
and never a gang cut below its minimum: an elastic gang (running more pods than its minimum)
first gives back its surplus pods and keeps running, and only then goes whole. Candidates are
tried cheapest first (lowest priority, a surplus before a whole gang, then least GPU-time lost,
then newest), and the set found is then minimised by putting back every victim whose eviction
turns out unnecessary.

Why this cannot loop: a reclaimer stays within nominal (in a cohort tree: its side stays within
what it holds where it meets the victim's, which borrows there), so it is never a reclaim victim
of that level; and priority preemption only goes from higher to lower priority inside one queue.
`tests/engine/test_no_preemption_loops.py` checks it on flat cohorts and on random trees.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gpucarve.core.amounts import Demand, FlavorName, QuotaKey
from gpucarve.core.held_idle import IdleRule, IdleStage
from gpucarve.core.workload import PodAssignment, RunningWorkload, Workload
from gpucarve.engine.decisions import HeldIdle
from gpucarve.engine.quota import Quotas
from gpucarve.engine.victims import CheapestFirst, Victim, VictimOrder
from gpucarve.engine.working import Working

MAX_VICTIMS = 64


Attempt = Callable[[], list[PodAssignment] | None]
# the searched-for workload's pods, (flavor, slices per pod, pods) per pod set of an unshared
# flavor: a cheap bound on whether a placement can succeed (`Preemptor._room_may_fit`)
Shape = tuple[tuple[FlavorName, int, int], ...]


def surplus(rw: RunningWorkload) -> tuple[PodAssignment, ...]:
    """The pods an elastic gang runs beyond each pod set's minimum (the last ones of each)."""
    out: list[PodAssignment] = []
    for ps in rw.workload.pod_sets:
        mine = sorted((p for p in rw.pods if p.pod_set == ps.name), key=_natural)
        out += mine[ps.min_count :]
    return tuple(out)


def _natural(pod: PodAssignment) -> tuple[str, int, str]:
    # `…/set-10` after `…/set-9`: a gang that grows back numbers its pods from where it is
    head, _, tail = pod.pod.rpartition("-")
    return (head, int(tail), "") if tail.isdigit() else (pod.pod, -1, tail)


def _give_back(ws: Working, w: Workload, pods: tuple[PodAssignment, ...]) -> None:
    by_name = {ps.name: ps for ps in w.pod_sets}
    for pod in pods:
        ps = by_name[pod.pod_set]
        node = ws.nodes[ws.node_index[pod.node]]
        ws.adjust_node(node, ps.cpu_milli, ps.memory_mib)
        if pod.flavor is not None:
            ws.give_back(ws.ordinals(pod.slice_ids), pod.shared_memory_mib)
            ws.adjust_usage(w.queue, pod.flavor, -len(pod.slice_ids))


def evict(ws: Working, rw: RunningWorkload) -> None:
    ws.remove_running(rw.workload.id)
    _give_back(ws, rw.workload, rw.pods)


def evict_victim(ws: Working, v: Victim) -> None:
    """Evict what `v` takes of the workload as it runs now in `ws` (an earlier victim of the
    same search may have taken its surplus already)."""
    current = ws.running.get(v.workload.id)
    if current is None:
        return
    if v.whole:
        evict(ws, current)
        return
    going = {p.pod for p in v.pods}
    if not going <= {p.pod for p in current.pods}:
        return
    ws.remove_running(current.workload.id)
    _give_back(ws, current.workload, v.pods)
    kept = tuple(p for p in current.pods if p.pod not in going)
    ws.add_running(dataclasses.replace(current, pods=kept))


@dataclass(frozen=True, slots=True)
class _Ranked:
    key: tuple[object, ...]
    victim: Victim


def _rank(r: _Ranked) -> tuple[object, ...]:
    return r.key


def _in_order(ranked: list[_Ranked]) -> list[Victim]:
    """Cheapest first; equal keys in the order given (a stable sort)."""
    ranked.sort(key=_rank)
    return [r.victim for r in ranked]


class Preemptor:
    def __init__(
        self,
        ws: Working,
        quotas: Quotas,
        now: int,
        min_runtime: int,
        order: VictimOrder | None = None,
    ) -> None:
        self.order: VictimOrder = order or CheapestFirst()
        self.ws = ws
        self.quotas = quotas
        self.now = now
        self.min_runtime = min_runtime
        self._by_queue: dict[str, tuple[int, list[RunningWorkload]]] = {}
        # per running workload, worked out once while it runs unchanged: the flavors it holds,
        # and (whether admitted this cycle, its candidate victims with their keys)
        self._held: dict[str, tuple[RunningWorkload, frozenset[FlavorName]]] = {}
        self._victims: dict[str, tuple[RunningWorkload, bool, list[_Ranked]]] = {}
        self.fresh: Mapping[str, object] = {}
        # (ratio, seconds): reclaim spares a whole gang more than `ratio` times the
        # reclaimer's size until the reclaimer has waited `seconds` (ratio None: never spares)
        self.large: tuple[int | None, int] = (None, 0)
        # queue -> the most its reclaims are held off for (its reclaimWaitSeconds)
        self.wait_bounds: Mapping[str, int] = {}
        # reclaimer -> why a gang it could reclaim from was spared this cycle (its reason)
        self.spared: dict[str, str] = {}
        # running work idle past its queue's warning window (engine.held_idle), and the rules
        self.idle: Mapping[str, HeldIdle] = {}
        self.idle_rules: Mapping[str, IdleRule] = {}

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

    def reclaim_candidates(self, w: Workload, demand: Demand) -> list[Victim]:
        q = self.quotas
        if q.queues[w.queue].cohort is None:
            return []
        flat = q.tree is None
        if flat and not q.within_nominal(w.queue, demand):
            return []  # reclaim only serves a queue that stays within its nominal quota
        keys = set(q.charge(w.queue, demand))
        largest = self._spared(w, demand)
        out: list[_Ranked] = []
        for other in q.tree_queues(w.queue):
            if other == w.queue or not any(q.loan(w.queue, other, k) > 0 for k in keys):
                continue
            if not flat and not q.may_reclaim(w.queue, other, demand):
                continue  # in a tree: its side stays within its own where the two meet
            lends: dict[frozenset[FlavorName], bool] = {}  # many workloads hold the same flavors
            for rw in self._running_of(other):
                held = self._holds(rw)
                ok = lends.get(held)
                if ok is None:
                    ok = lends[held] = self._lends_back(w.queue, other, held, keys)
                if ok:
                    ranked = self._ranked(rw)
                    kept = [r for r in ranked if self._in_size(r.victim, largest)]
                    if len(kept) < len(ranked):
                        self._note_spared(w, rw, largest)
                    out += kept
        return _in_order(out)

    def _after(self, w: Workload) -> tuple[int, str]:
        """How long `w` may be held off by sparing, and the setting that says so."""
        after = self.large[1]
        bound = self.wait_bounds.get(w.queue)
        if bound is not None and bound < after:
            return bound, f"queue {w.queue}'s reclaimWaitSeconds"
        return after, "scheduling.reclaimLargeVictimAfterSeconds"

    def _note_spared(self, w: Workload, rw: RunningWorkload, largest: int | None) -> None:
        ratio = self.large[0]
        if w.id in self.spared or largest is None or ratio is None:
            return
        size = sum(len(p.slice_ids) for p in rw.pods)
        after, setting = self._after(w)
        left = after - (self.now - w.submit_time)
        self.spared[w.id] = (
            f"reclaim spares {rw.workload.id}: it holds {size} slices, more than {ratio} times "
            f"the {largest // ratio} this workload needs (scheduling.reclaimLargeVictimRatio); "
            f"it may be reclaimed in {left} s ({setting}), "
            "or its GPUs come back when it ends"
        )

    def _lends_back(
        self, reclaimer: str, queue: str, held: frozenset[FlavorName], keys: set[QuotaKey]
    ) -> bool:
        """Whether evicting what `queue` holds of the flavors `held` gives the cohort back
        quota in one of `keys` (the reclaimer's): the queue borrows there (in a tree: its
        side borrows where it meets the reclaimer's)."""
        q = self.quotas
        return any(
            k in keys and q.loan(reclaimer, queue, k) > 0 for f in held for k, _ in q.keys(queue, f)
        )

    def _spared(self, w: Workload, demand: Demand) -> int | None:
        """The most slices a whole gang may hold and still be reclaimed for `w` now (None: any
        size). A reclaim that evicts a gang many times the reclaimer's size destroys far more
        work than it frees for the reclaimer; it waits for something cheaper, or the gang's
        end, for `large[1]` seconds at most: the nominal guarantee comes that much later."""
        ratio = self.large[0]
        if ratio is None or self.now - w.submit_time >= self._after(w)[0]:
            return None
        return ratio * max(1, sum(demand.values()))

    def preempt_candidates(self, w: Workload, demand: Demand) -> list[Victim]:
        flavors = set(demand)
        out: list[_Ranked] = []
        for rw in self._running_of(w.queue):
            if rw.workload.priority < w.priority and not flavors.isdisjoint(self._holds(rw)):
                out += self._ranked(rw)
        return _in_order(out)

    def idle_candidates(self, w: Workload, demand: Demand) -> list[Victim]:
        """Reclaimable idle work (engine.held_idle) holding a flavor `w` needs, of any queue
        and priority: its GPUs go to work that uses them."""
        flavors = set(demand)
        out: list[_Ranked] = []
        for wid, h in self.idle.items():
            rw = self.ws.running.get(wid)
            if h.stage is not IdleStage.RECLAIMABLE or rw is None or wid == w.id:
                continue
            if self._eligible(rw) and not flavors.isdisjoint(self._holds(rw)):
                out += self._ranked(rw)
        return _in_order(out)

    def _idle_may_go(self, v: Victim) -> bool:
        """Whether idle `v` may still be evicted as things stand (its queue borrows what it
        holds, unless its rule reclaims within quota too)."""
        rule = self.idle_rules[v.workload.queue]
        return rule.within_quota or any(
            self.quotas.borrows(v.workload.queue, f) for f in {p.flavor for p in v.held if p.flavor}
        )

    def find_idle(
        self,
        w: Workload,
        demand: Demand,
        candidates: list[Victim],
        attempt: Attempt,
        shape: Shape = (),
    ) -> tuple[list[PodAssignment], list[Victim]] | None:
        """`find` for idle work: the fewest reclaimable idle victims that let `w` place, each
        evicted while its queue still borrows what it holds (so work within its nominal quota
        stays, unless its rule says otherwise)."""
        chosen, _ = self._grow(w, demand, candidates, attempt, self._idle_may_go, shape)
        if not chosen:
            return None
        needed = self._fewest(w, demand, chosen, attempt)
        ws = self.ws
        cp = ws.checkpoint()
        for v in needed:
            if not self._idle_may_go(v):
                ws.rollback(cp)
                return None
            evict_victim(ws, v)
        placed = attempt()
        assert placed is not None, "the minimal victim set stopped working"
        return placed, needed

    def maturing(self, w: Workload, demand: Mapping[FlavorName, int]) -> str | None:
        """Why priority preemption has not made room for `w` yet when only the minimum
        runtime stands in its way: the lower-priority work of its queue on the flavors it
        needs has not run `min_runtime` yet (the soonest to reach it named, with the time
        left). None when some of that work may already go, or there is none."""
        flavors = set(demand)
        young: list[tuple[int, str, int]] = []
        for rw in self.ws.running_by_queue.get(w.queue, {}).values():
            v = rw.workload
            if v.priority >= w.priority or flavors.isdisjoint(self._holds(rw)):
                continue
            if not v.preemptible or rw.terminating:
                continue
            if self._eligible(rw):
                return None  # it may go now: something else keeps w waiting
            young.append((rw.start_time + self.min_runtime - self.now, v.id, v.priority))
        if not young:
            return None
        left, victim, priority = min(young)
        return (
            f"waits to preempt {victim} (priority {priority} < {w.priority}): it has run "
            f"{self.min_runtime - left} s of its minimum runtime of {self.min_runtime} s "
            f"(scheduling.minRuntimeSeconds), preemptible in {left} s"
        )

    def _holds(self, rw: RunningWorkload) -> frozenset[FlavorName]:
        """The flavors `rw` holds."""
        hit = self._held.get(rw.workload.id)
        if hit is not None and hit[0] is rw:
            return hit[1]
        held = frozenset(p.flavor for p in rw.pods if p.flavor)
        self._held[rw.workload.id] = (rw, held)
        return held

    def _ranked(self, rw: RunningWorkload) -> list[_Ranked]:
        """`rw`'s candidate victims with their keys: one per surplus pod of an elastic gang
        (the last first: as few pods go as make room), and the gang whole."""
        wid = rw.workload.id
        fresh = wid in self.fresh
        hit = self._victims.get(wid)
        if hit is not None and hit[0] is rw and hit[1] == fresh:
            return hit[2]
        extra = () if fresh else surplus(rw)
        # idle work past its warning window goes first, whatever the order says after that
        first = 0 if wid in self.idle else 1
        ranked = [
            _Ranked((first, *self.order.key(v, self.ws, self.now)), v)
            for v in [*(Victim(rw, (pod,)) for pod in reversed(extra)), Victim(rw)]
        ]
        self._victims[wid] = (rw, fresh, ranked)
        return ranked

    def _in_size(self, v: Victim, largest: int | None) -> bool:
        """Whether `v` may go for a reclaimer that spares whole gangs holding more than
        `largest` slices (their surplus pods may still go)."""
        if largest is None or not v.whole or v.workload.id in self.fresh:
            return True
        return sum(len(p.slice_ids) for p in v.rw.pods) <= largest

    def find(
        self,
        w: Workload,
        demand: Demand,
        candidates: list[Victim],
        attempt: Attempt,
        shape: Shape = (),
    ) -> tuple[list[PodAssignment], list[Victim]] | None:
        """Evict candidates in order until `attempt` (quota check + gang placement) succeeds,
        then drop every victim that was not needed. Leaves the state with the victims evicted
        and the workload placed, or untouched when there is no solution."""
        keys = set(self.quotas.charge(w.queue, demand))
        loans = self._loans(w, candidates[:MAX_VICTIMS], keys)

        # Cheapest first, each taken while its queue still borrows. A loan in a flavor is in
        # the shape the reclaimer needs; one in a GPU unit need not be (a queue can borrow in
        # 2g.20gb while the 3g.40gb asked for are within its nominal GPUs): failing that, any
        # that make room, as long as the set takes back no more than the loans (below).
        def lends_back(v: Victim) -> bool:
            held = frozenset(p.flavor for p in v.held if p.flavor)
            return v.workload.queue == w.queue or self._lends_back(
                w.queue, v.workload.queue, held, keys
            )

        chosen, skipped = self._grow(w, demand, candidates, attempt, lends_back, shape)
        if chosen is None and skipped and any(k in self.quotas.units for k in keys):
            chosen, _ = self._grow(w, demand, candidates, attempt, None, shape)
        if not chosen:
            return None
        ws = self.ws
        needed = self._fewest(w, demand, chosen, attempt)
        if not self._within_loans(w, needed, keys, loans):
            return None
        for v in needed:
            evict_victim(ws, v)
        placed = attempt()
        assert placed is not None, "the minimal victim set stopped working"
        return placed, needed

    def _fewest(
        self, w: Workload, demand: Demand, chosen: list[Victim], attempt: Attempt
    ) -> list[Victim]:
        """`chosen` without every victim whose eviction turns out unnecessary."""
        needed = list(chosen)
        # `_grow` stopped at the first prefix that works, so the set without its last victim
        # (a state `_grow` tried, when there was one before it) is known not to: start below
        for v in reversed(chosen[:-1] if len(chosen) > 1 else chosen):
            trial = [x for x in needed if x is not v]
            if self._works(w, demand, trial, attempt):
                needed = trial
        return needed

    def _grow(
        self,
        w: Workload,
        demand: Demand,
        candidates: list[Victim],
        attempt: Attempt,
        may_go: Callable[[Victim], bool] | None,
        shape: Shape,
    ) -> tuple[list[Victim] | None, bool]:
        """Candidates evicted in order until the workload places (the state is left as it
        was); one `may_go` refuses as things stand after earlier evictions (its queue stopped
        borrowing) is skipped, and the second value says whether one was; an empty list: no
        candidate set makes room (the search stops there, skipped or not)."""
        ws = self.ws
        cp = ws.checkpoint()
        chosen: list[Victim] = []
        found = skipped = False
        judged = False  # whether evicting every candidate was tried
        for v in candidates[:MAX_VICTIMS]:
            if may_go is not None and not may_go(v):
                skipped = True
                continue
            evict_victim(ws, v)
            chosen.append(v)
            if self.quotas.check(w.queue, demand).fits and self._room_may_fit(demand, shape):
                inner = ws.checkpoint()
                if attempt() is not None:
                    found = True
                    ws.rollback(inner)
                    break
                ws.rollback(inner)
                if not judged:
                    # The first prefix that failed: if evicting every candidate would not make
                    # room either, none of the longer prefixes will (one placement, where a
                    # search that fails, as most do on a busy cluster, would try one each).
                    judged = True
                    if not self._all_make_room(w, demand, candidates, chosen, attempt, shape):
                        ws.rollback(cp)
                        return [], skipped
        ws.rollback(cp)
        return (chosen if found else None), skipped

    def _all_make_room(
        self,
        w: Workload,
        demand: Demand,
        candidates: list[Victim],
        evicted: list[Victim],
        attempt: Attempt,
        shape: Shape,
    ) -> bool:
        """Whether the workload places with every candidate evicted (`evicted` already are);
        the state is left as it was."""
        ws = self.ws
        cp = ws.checkpoint()
        gone = {id(v) for v in evicted}
        for v in candidates[:MAX_VICTIMS]:
            if id(v) not in gone:
                evict_victim(ws, v)
        ok = (
            self.quotas.check(w.queue, demand).fits
            and self._room_may_fit(demand, shape)
            and attempt() is not None
        )
        ws.rollback(cp)
        return ok

    def _loans(
        self, w: Workload, victims: list[Victim], keys: set[QuotaKey]
    ) -> dict[tuple[str, QuotaKey], int]:
        """What each other queue among the victims borrows, per reclaimer's key, now."""
        out: dict[tuple[str, QuotaKey], int] = {}
        for v in victims:
            queue = v.workload.queue
            if queue != w.queue:
                for k in keys:
                    out[(queue, k)] = self.quotas.loan(w.queue, queue, k)
        return out

    def _within_loans(
        self,
        w: Workload,
        victims: list[Victim],
        keys: set[QuotaKey],
        loans: dict[tuple[str, QuotaKey], int],
    ) -> bool:
        """Reclaim takes back loans only: per queue and key, evicted in some order (the
        largest last), each victim goes while its queue still borrows there."""
        taken: dict[tuple[str, QuotaKey], list[int]] = {}
        for v in victims:
            if v.workload.queue == w.queue:
                continue
            for k in keys:
                taken.setdefault((v.workload.queue, k), []).append(
                    self.quotas.held(v.workload.queue, v.held, k)
                )
        return all(
            not any(parts) or sum(parts) - max(parts) < loans.get(qk, 0)
            for qk, parts in taken.items()
        )

    def _room_may_fit(self, demand: Demand, shape: Shape) -> bool:
        """A cheap necessary condition before trying a placement: enough free slices in
        total, and for each pod set nodes that hold that many of its pods (each pod's slices
        lie on one node); for shared flavors the index counts per GPU, so it is no bound
        there."""
        ws = self.ws
        for flavor, d in demand.items():
            if ws.index[flavor].total < d and not ws.flavors[flavor].shared:
                return False
        for flavor, per_pod, pods in shape:
            buckets = ws.index[flavor].buckets
            room = sum(len(nodes) * (free // per_pod) for free, nodes in buckets.items())
            if room < pods:
                return False
        return True

    def _works(self, w: Workload, demand: Demand, victims: list[Victim], attempt: Attempt) -> bool:
        ws = self.ws
        cp = ws.checkpoint()
        for v in victims:
            evict_victim(ws, v)
        ok = self.quotas.check(w.queue, demand).fits and attempt() is not None
        ws.rollback(cp)
        return ok
