"""Quota: what a queue may use in each flavor, borrowing through its cohort, and fair share.

A quota is keyed by a flavor (counted in slices) or by a GPU unit (`core.policy.GpuUnit`:
every flavor of one model, counted in parts of a GPU, so one quota covers a model's MIG
profiles, whole GPUs and shared replicas alike); a slice is charged to each key of its queue
that covers its flavor, and must fit all of them (a flavor key beside a unit caps that flavor).

Per queue and key: `nominal` slices are the queue's; of those, `lendable` (its lending limit,
all of nominal when unset) go into its cohort's pool and the rest is guaranteed to it alone.
Usage above the guaranteed part draws on the cohort's pool. A queue may use up to
`nominal + borrowingLimit` (no limit when unset) as long as the pool has room. When others have
taken pool capacity that a queue needs to reach its own nominal quota, it can reclaim it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from gpucarve.core.amounts import UNLIMITED, Bound, FlavorName, QuotaKey, as_key
from gpucarve.core.cohort_tree import CohortTree, cohort_tree
from gpucarve.core.policy import GpuUnit, Policy, Queue
from gpucarve.core.workload import PodAssignment

SCALE = 1000


class Limit(StrEnum):
    """What a queue's quota stops, for one flavor."""

    NO_QUOTA = "no-quota"  # the queue has no quota for the flavor
    NOMINAL = "nominal"  # past nominal, and in no cohort to borrow from
    BORROWING_LIMIT = "borrowing-limit"  # past nominal plus its borrowing limit
    COHORT = "cohort"  # the cohort has less to lend than it must borrow


@dataclass(frozen=True, slots=True)
class Standing:
    """A queue's standing in one quota key against a demand of `need` more (slices of a
    flavor, or parts of a GPU unit): every fact admission, explain, metrics and the idle
    accounting read, worked out once, here."""

    queue: str
    flavor: QuotaKey  # a flavor, or a GPU unit
    need: int
    used: int = 0
    nominal: int = 0
    borrowing_limit: Bound = UNLIMITED
    cohort: str | None = None
    # The cohort's pool: how much more of it the demand would draw (usage past the part of
    # nominal the queue does not lend), and how much of it is free now (negative when a
    # policy change left it overdrawn).
    pool_draw: int = 0
    pool_room: int = 0
    has_quota: bool = True
    unit: GpuUnit | None = None
    # What of the pool is kept from this loan for lenders' waiting work, and those lenders
    # (scheduling.loansWaitForLenders); already taken off pool_room.
    withheld: int = 0
    withheld_for: tuple[str, ...] = ()
    # In a cohort tree: the cohort whose room (or borrowing limit) bounds pool_room, when
    # another than the queue's own; and whether some level below the root (the queue, or a
    # cohort above it) stays within what it holds with the demand (reclaim may serve it).
    bound_by: str | None = None
    within_below_root: bool | None = None

    @property
    def borrow(self) -> int:
        """How much past nominal the queue would be with the demand."""
        return self.used + self.need - self.nominal

    @property
    def limits(self) -> tuple[Limit, ...]:
        """Every limit the demand runs into, most basic first (empty: it fits)."""
        if not self.has_quota:
            return (Limit.NO_QUOTA,)
        if self.borrow <= 0 and self.cohort is None:
            return ()
        if self.cohort is None:
            return (Limit.NOMINAL,)
        out: list[Limit] = []
        if self.over_borrowing_limit:
            out.append(Limit.BORROWING_LIMIT)
        if self.short_in_cohort:
            out.append(Limit.COHORT)
        return tuple(out)

    @property
    def over_borrowing_limit(self) -> bool:
        return self.borrowing_limit.exceeded_by(self.borrow)

    @property
    def cohort_lends(self) -> int:
        return max(0, self.pool_room)

    @property
    def short_in_cohort(self) -> bool:
        return self.cohort is not None and self.pool_draw > self.pool_room

    @property
    def reclaimable(self) -> bool:
        """The failure is one reclaim can cure: within nominal, the cohort lent it out."""
        within = self.borrow <= 0 if self.within_below_root is None else self.within_below_root
        return self.limits == (Limit.COHORT,) and within

    def amount(self, n: int | Bound) -> str:
        fmt = str if self.unit is None else self.unit.gpus_text
        return n.text(fmt) if isinstance(n, Bound) else fmt(n)

    def message(self) -> str:
        limits = self.limits
        if not limits:
            return ""
        what = self.flavor if self.unit is None else f"{self.flavor} GPUs"
        at = (
            f"queue {self.queue} at {self.amount(self.used)}/{self.amount(self.nominal)} "
            f"{what}, needs {self.amount(self.need)} more"
        )
        first = limits[0]
        if first is Limit.NO_QUOTA:
            return f"queue {self.queue} has no quota for {self.flavor}"
        if first is Limit.NOMINAL:
            return at + " and is in no cohort to borrow from"
        if first is Limit.BORROWING_LIMIT:
            return at + f"; borrowing limit {self.amount(self.borrowing_limit)}"
        lends = f"; cohort {self.cohort} has {self.amount(self.cohort_lends)} to lend"
        if self.bound_by is not None:
            lends += f" (bounded by cohort {self.bound_by} above it)"
        if self.withheld:
            lends += (
                f" ({self.amount(self.withheld)} more kept for work of queue "
                f"{', '.join(self.withheld_for)} that waits within its nominal quota)"
            )
        return at + lends


@dataclass(frozen=True, slots=True)
class QuotaVerdict:
    fits: bool
    standing: Standing | None = None  # the first quota key that does not fit

    @property
    def message(self) -> str:
        return "" if self.standing is None else self.standing.message()

    @property
    def flavor(self) -> QuotaKey | None:
        return None if self.standing is None else self.standing.flavor

    @property
    def limit(self) -> Limit | None:
        return None if self.standing is None else self.standing.limits[0]

    @property
    def reclaimable(self) -> bool:
        return self.standing is not None and self.standing.reclaimable


@dataclass(frozen=True, slots=True)
class _Limits:
    nominal: int
    guaranteed: int
    lendable: int
    borrowing_limit: Bound


# The quota keys a slice is charged to, with its cost in each.
Charges = tuple[tuple[QuotaKey, int], ...]
# Slices held, per (queue, flavor).
Usage = dict[tuple[str, FlavorName], int]
# A node of a cohort tree: ("queue", name) or ("cohort", name).
Node = tuple[str, str]


class Quotas:
    def __init__(self, policy: Policy, usage: Usage) -> None:
        self.usage = usage  # shared with Working (undo)
        self.policy = policy
        self.queues: dict[str, Queue] = {q.name: q for q in policy.queues}
        self.units = policy.units
        self.limits: dict[tuple[str, QuotaKey], _Limits] = {}
        self.members: dict[str, list[str]] = {}
        self.pool: dict[tuple[str, QuotaKey], int] = {}  # per (cohort, key)
        self._keys: dict[tuple[str, FlavorName], Charges] = {}
        # (queue, key) -> what the queue's waiting work within its nominal quota asks of the
        # key; set by the cycle only under scheduling.loansWaitForLenders (empty: lend all).
        self.waiting: dict[tuple[str, QuotaKey], int] = {}
        for q in policy.queues:
            if q.cohort is not None:
                self.members.setdefault(q.cohort, []).append(q.name)
            for quota in q.quotas:
                lendable = quota.lendable
                lim = _Limits(
                    quota.nominal, quota.nominal - lendable, lendable, quota.borrowing_limit
                )
                self.limits[(q.name, quota.flavor)] = lim
                if q.cohort is not None:
                    key = (q.cohort, quota.flavor)
                    self.pool[key] = self.pool.get(key, 0) + lendable
        # A cohort tree (cohorts in cohorts, or with quota of their own); None for flat
        # cohorts, whose arithmetic below is the tree's with one level.
        self.tree: CohortTree | None = None
        self._paths: dict[str, list[Node]] = {}
        if policy.nested:
            self.tree = cohort_tree(policy)
            self.pool = {k: lvl.subtree for k, lvl in self.tree.levels.items()}

    def keys(self, queue: str, flavor: FlavorName) -> Charges:
        """The quota keys a slice of `flavor` is charged to in `queue`, with its cost in each."""
        hit = self._keys.get((queue, flavor))
        if hit is None:
            q = self.queues.get(queue)
            hit = () if q is None else self.policy.quota_keys(q, flavor)
            self._keys[(queue, flavor)] = hit
        return hit

    def held(self, queue: str, pods: Iterable[PodAssignment], key: QuotaKey) -> int:
        """What `pods` of `queue` hold of one of its quota keys (slices, or parts of a unit)."""
        return sum(
            len(p.slice_ids) * cost
            for p in pods
            if p.flavor is not None
            for k, cost in self.keys(queue, p.flavor)
            if k == key
        )

    def has_quota(self, queue: str, flavor: FlavorName) -> bool:
        return bool(self.keys(queue, flavor))

    def used(self, queue: str, key: QuotaKey) -> int:
        """What the queue holds of a quota key: slices of a flavor, parts of a GPU unit."""
        unit = self.units.get(key)
        if unit is None:  # a flavor's own key
            return self.usage.get((queue, FlavorName(key)), 0)
        usage = self.usage
        return sum(usage.get((queue, f), 0) * cost for f, cost in unit.charges)

    def nominal(self, queue: str, key: QuotaKey) -> int:
        lim = self.limits.get((queue, key))
        return 0 if lim is None else lim.nominal

    def pool_used(self, cohort: str, key: QuotaKey) -> int:
        """What the cohort's members draw of what it holds (usage past their guaranteed
        part, a child cohort's as its own)."""
        if self.tree is not None:
            return self._usage(("cohort", cohort), key)
        total = 0
        for q in self.members.get(cohort, ()):
            lim = self.limits.get((q, key))
            if lim is not None:
                total += max(0, self.used(q, key) - lim.guaranteed)
        return total

    def borrowed(self, queue: str, key: QuotaKey) -> int:
        return max(0, self.used(queue, key) - self.nominal(queue, key))

    def borrows(self, queue: str, flavor: FlavorName) -> bool:
        """Whether the queue is past its nominal quota in a key that covers `flavor`."""
        return any(self.borrowed(queue, key) > 0 for key, _ in self.keys(queue, flavor))

    def charge(self, queue: str, demand: Mapping[FlavorName, int]) -> dict[QuotaKey, int]:
        """A demand in slices per flavor as what it costs per quota key of the queue (a flavor
        no key covers is charged to itself, where the queue has no quota)."""
        out: dict[QuotaKey, int] = {}
        for flavor, n in demand.items():
            keys = self.keys(queue, flavor) or ((as_key(flavor), 1),)
            for key, cost in keys:
                out[key] = out.get(key, 0) + n * cost
        return out

    def exceeds_nominal(self, queue: str, demand: Mapping[FlavorName, int]) -> bool:
        """Whether `demand`, with nothing else held, is past the queue's nominal quota."""
        return any(n > self.nominal(queue, k) for k, n in self.charge(queue, demand).items())

    def within_nominal(self, queue: str, demand: Mapping[FlavorName, int]) -> bool:
        """Whether `demand`, beside what the queue holds, is within its nominal quota."""
        return all(
            self.used(queue, k) + n <= self.nominal(queue, k)
            for k, n in self.charge(queue, demand).items()
        )

    def standing(self, queue: str, key: QuotaKey, need: int) -> Standing:
        lim = self.limits.get((queue, key))
        unit = self.units.get(key)
        if lim is None:
            return Standing(queue, key, need, has_quota=False, unit=unit)
        used = self.used(queue, key)
        cohort = self.queues[queue].cohort
        room = draw = kept = 0
        lenders: tuple[str, ...] = ()
        bound_by = None
        within: bool | None = None
        if cohort is not None:
            room = self.pool.get((cohort, key), 0) - self.pool_used(cohort, key)
            if self.tree is not None:
                room, bound_by = self.room(cohort, key)
                bound_by = None if bound_by == cohort else bound_by
                within = self._within_below_root(queue, key, need)
            draw = max(0, used + need - lim.guaranteed) - max(0, used - lim.guaranteed)
            if self.waiting and used + need > lim.nominal:  # a loan
                kept, lenders = self.withheld(cohort, key, queue)
                room -= kept
        return Standing(
            queue, key, need, used, lim.nominal, lim.borrowing_limit, cohort, draw, room, True,
            unit, kept, lenders, bound_by, within,
        )  # fmt: skip

    def withheld(self, cohort: str, key: QuotaKey, borrower: str) -> tuple[int, tuple[str, ...]]:
        """What of the cohort's pool is not lent to `borrower`: each other member's unused
        nominal quota of `key`, up to what its own waiting work asks there; with the members
        that keep it."""
        kept = 0
        lenders: list[str] = []
        for q in self.members.get(cohort, ()):
            want = self.waiting.get((q, key), 0)
            lim = self.limits.get((q, key))
            if q == borrower or want <= 0 or lim is None:
                continue
            n = min(want, lim.lendable, max(0, lim.nominal - self.used(q, key)))
            if n > 0:
                kept += n
                lenders.append(q)
        return kept, tuple(lenders)

    def note_waiting(self, queue: str, demand: Mapping[FlavorName, int], sign: int = 1) -> None:
        """Count `demand` (slices per flavor) of `queue`'s waiting work (sign 1), or take
        back what it was charged once admitted (sign -1)."""
        for key, n in self.charge(queue, demand).items():
            k = (queue, key)
            left = self.waiting.get(k, 0) + sign * n
            if left > 0:
                self.waiting[k] = left
            else:
                self.waiting.pop(k, None)

    def check(self, queue: str, demand: Mapping[FlavorName, int]) -> QuotaVerdict:
        for key, d in sorted(self.charge(queue, demand).items()):
            st = self.standing(queue, key, d)
            if st.limits:
                return QuotaVerdict(False, st)
        return QuotaVerdict(True)

    def _reach_key(self, queue: str, key: QuotaKey) -> int:
        lim = self.limits[(queue, key)]
        cohort = self.queues[queue].cohort
        if cohort is None:
            return lim.nominal
        if self.tree is not None:
            # what the tree would let it draw were nothing else used, within its own limit
            up = lim.borrowing_limit.cap(self._room_when_idle(cohort, key) - lim.lendable)
            return lim.nominal + max(0, up)
        others = self.pool.get((cohort, key), 0) - lim.lendable
        return lim.nominal + max(0, lim.borrowing_limit.cap(others))

    def reach(self, queue: str, flavor: FlavorName) -> int:
        """The most slices of `flavor` the queue could ever hold: nominal plus what it may
        borrow of what the rest of its cohort lends, in every key that covers it."""
        keys = self.keys(queue, flavor)
        if not keys:
            return 0
        return min(self._reach_key(queue, key) // cost for key, cost in keys)

    def borrowed_share(self, queue: str) -> int:
        """Dominant share of what the queue borrows of its cohort's pool (SCALE squared for
        all of it), before its weight."""
        q = self.queues[queue]
        if q.cohort is None:
            return 0
        share = 0
        for quota in q.quotas:
            borrowed = self.borrowed(queue, quota.flavor)
            if borrowed:
                pool = max(1, self.pool.get((q.cohort, quota.flavor), 0))
                share = max(share, borrowed * SCALE * SCALE // pool)
        return share

    def fair_share(self, queue: str, recent: int = 0) -> int:
        """Dominant share of what the queue borrows, plus `recent` (what it borrowed
        recently, decayed: core.usage), over its weight (lower goes first)."""
        q = self.queues[queue]
        return (self.borrowed_share(queue) + recent) * SCALE // max(1, q.weight_milli)

    def borrowed_shares(self) -> dict[str, int]:
        """Each queue's borrowed share now, those that borrow (what the usage book holds)."""
        out = {q: self.borrowed_share(q) for q in sorted(self.queues)}
        return {q: v for q, v in out.items() if v > 0}

    # --- a cohort tree (policy.nested): levels between a queue and its root cohort ---

    def _tree(self) -> CohortTree:
        assert self.tree is not None
        return self.tree

    def _node_quota(self, node: Node, key: QuotaKey) -> tuple[int, int, Bound]:
        """(subtree, guaranteed, borrowing limit) of a node in one key."""
        kind, name = node
        if kind == "queue":
            lim = self.limits.get((name, key))
            if lim is None:
                return 0, 0, UNLIMITED
            return lim.nominal, lim.guaranteed, lim.borrowing_limit
        lvl = self._tree().level(name, key)
        return lvl.subtree, lvl.guaranteed, lvl.borrowing_limit

    def _usage(self, node: Node, key: QuotaKey) -> int:
        """What a node uses of a key: a queue what it holds; a cohort what its members use
        past their guaranteed parts."""
        kind, name = node
        if kind == "queue":
            return self.used(name, key)
        tree = self._tree()
        total = 0
        for member in [("queue", q) for q in tree.queues.get(name, ())] + [
            ("cohort", c) for c in tree.children.get(name, ())
        ]:
            guaranteed = self._node_quota(member, key)[1]
            total += max(0, self._usage(member, key) - guaranteed)
        return total

    def path(self, queue: str) -> list[Node]:
        """The queue, then each cohort above it, up to its root (worked out once)."""
        hit = self._paths.get(queue)
        if hit is None:
            hit = self._paths[queue] = [("queue", queue)] + [
                ("cohort", c) for c in self._tree().path(self.queues[queue].cohort)
            ]
        return hit

    def _deltas(self, queue: str, key: QuotaKey, need: int) -> list[tuple[Node, int, int]]:
        """Each node of the queue's path with its usage now and what `need` more for the
        queue adds to it."""
        out: list[tuple[Node, int, int]] = []
        delta = need
        for node in self.path(queue):
            usage = self._usage(node, key)
            out.append((node, usage, delta))
            guaranteed = self._node_quota(node, key)[1]
            delta = max(0, usage + delta - guaranteed) - max(0, usage - guaranteed)
        return out

    def room(self, cohort: str, key: QuotaKey) -> tuple[int, str]:
        """What the cohort's members may still draw from it: its unused guaranteed part plus
        what its parent has (capped by its borrowing limit), up to the root; with the
        cohort whose room or limit bounds it."""
        tree = self._tree()
        chain = tree.path(cohort)
        root = chain[-1]
        lvl = tree.level(root, key)
        room, bound = lvl.subtree - self._usage(("cohort", root), key), root
        for name in reversed(chain[:-1]):
            lvl = tree.level(name, key)
            usage = self._usage(("cohort", name), key)
            most = lvl.borrowing_limit.most
            if most is not None:
                cap = lvl.lendable - max(0, usage - lvl.guaranteed) + most
                if cap < room:
                    room, bound = cap, name
            room += max(0, lvl.guaranteed - usage)
        return room, bound

    def _room_when_idle(self, cohort: str, key: QuotaKey) -> int:
        """`room` with nothing used anywhere."""
        tree = self._tree()
        chain = tree.path(cohort)
        room = tree.level(chain[-1], key).subtree
        for name in reversed(chain[:-1]):
            lvl = tree.level(name, key)
            room = lvl.borrowing_limit.plus(lvl.lendable).cap(room) + lvl.guaranteed
        return room

    def _within_below_root(self, queue: str, key: QuotaKey, need: int) -> bool:
        """Whether the queue, or a cohort above it below the root, stays within what it
        holds with `need` more."""
        levels = self._deltas(queue, key, need)[:-1]
        return any(
            usage + d <= self._node_quota(node, key)[0] and self._reclaims_for(node)
            for node, usage, d in levels
        )

    def _reclaims_for(self, node: Node) -> bool:
        """Whether a reclaim may rest on this node's room: a queue's own, always; a cohort's
        for its members, unless it says not (`cohorts[].reclaimForMembers: false`)."""
        kind, name = node
        return kind == "queue" or self._tree().reclaim_for_members.get(name, True)

    def meet(self, reclaimer: str, queue: str) -> tuple[Node, Node] | None:
        """Where two queues' paths meet: the reclaimer's node and the other's just below
        their nearest common cohort (None: not in one tree)."""
        mine = self.path(reclaimer)
        theirs = self.path(queue)
        common = set(mine[1:]) & set(theirs[1:])
        if not common:
            return None
        a = next(i for i, n in enumerate(mine) if n in common)
        b = next(i for i, n in enumerate(theirs) if n in common)
        return mine[a - 1], theirs[b - 1]

    def loan(self, reclaimer: str, queue: str, key: QuotaKey) -> int:
        """What `queue` borrows where it meets `reclaimer`: flat, what it borrows of its
        cohort; in a tree, as much of what it borrows itself as its side borrows of their
        nearest common cohort."""
        if self.tree is None:
            return self.borrowed(queue, key)
        met = self.meet(reclaimer, queue)
        if met is None:
            return 0
        # the queue itself borrows (its work within its own nominal quota is never a loan),
        # and so does its side where the two meet: what comes back is the lesser
        node = met[1]
        side = max(0, self._usage(node, key) - self._node_quota(node, key)[0])
        return min(self.borrowed(queue, key), side)

    def may_reclaim(self, reclaimer: str, queue: str, demand: Mapping[FlavorName, int]) -> bool:
        """Whether `reclaimer` may take back from `queue` for `demand`: flat, it stays within
        its nominal quota; in a tree, its side stays within what it holds where the two
        meet (a team past its own quota reclaims from another department while its
        department stays within its own)."""
        if self.tree is None:
            return self.within_nominal(reclaimer, demand)
        return all(
            self.may_reclaim_in(reclaimer, queue, key, need)
            for key, need in self.charge(reclaimer, demand).items()
        )

    def may_reclaim_in(self, reclaimer: str, queue: str, key: QuotaKey, need: int) -> bool:
        """`may_reclaim` for `need` more of one quota key."""
        if self.tree is None:
            return self.used(reclaimer, key) + need <= self.nominal(reclaimer, key)
        met = self.meet(reclaimer, queue)
        if met is None:
            return False
        levels = self._deltas(reclaimer, key, need)
        own = levels[0][1] + levels[0][2] <= self._node_quota(levels[0][0], key)[0]
        for node, usage, d in levels:
            # a queue within its own nominal quota takes it back wherever it was lent; past
            # it, only where every cohort up to the meeting point lets its members reclaim
            if not own and not self._reclaims_for(node):
                return False
            if node == met[0]:
                return usage + d <= self._node_quota(node, key)[0]
        return False

    def tree_queues(self, queue: str) -> list[str]:
        """The queues a reclaimer may look at: its cohort's (flat), its root's (tree)."""
        cohort = self.queues[queue].cohort
        if cohort is None:
            return []
        if self.tree is None:
            return self.members.get(cohort, [])
        root = self.tree.root(cohort)
        return [q for q in sorted(self.queues) if self.path(q)[-1] == ("cohort", root)]

    def share_path(
        self, queue: str, demand: Mapping[FlavorName, int], recent: int = 0
    ) -> tuple[int, ...]:
        """Fair share at each level from the root down, with `demand` admitted: per node
        below the root, the dominant share of its parent it would borrow, over its weight
        (the queue's own with `recent`). Siblings are compared first at the highest level
        where they differ: a department within its own quota goes before one that borrows."""
        charges = self.charge(queue, demand)
        nodes = self.path(queue)
        shares = [0] * (len(nodes) - 1)
        for key, need in charges.items():
            levels = self._deltas(queue, key, need)
            for i, (node, usage, d) in enumerate(levels[:-1]):
                parent = levels[i + 1][0]
                held = self._node_quota(node, key)[0]
                over = max(0, usage + d - held)
                pool = max(1, self._node_quota(parent, key)[0])
                shares[i] = max(shares[i], over * SCALE * SCALE // pool)
        out: list[int] = []
        for i, (kind, name) in enumerate(nodes[:-1]):
            if kind == "queue":
                out.append((shares[i] + recent) * SCALE // max(1, self.queues[name].weight_milli))
            else:
                out.append(shares[i] * SCALE // max(1, self._tree().weight_milli[name]))
        return tuple(reversed(out))

    def levels(self, cohort: str, key: QuotaKey) -> list[tuple[str, int, int, int]]:
        """Per cohort from `cohort` up to its root: (name, what it holds, what its members
        draw of it, what its members may still draw) — explain's chain of levels."""
        tree = self._tree()
        return [
            (name, tree.level(name, key).subtree, self._usage(("cohort", name), key),
             self.room(name, key)[0])
            for name in tree.path(cohort)
        ]  # fmt: skip
