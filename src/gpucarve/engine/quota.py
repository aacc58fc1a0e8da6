"""Quota: what a queue may use in each flavor, borrowing through its cohort, and fair share.

Per queue and flavor: `nominal` slices are the queue's; of those, `lendable` (its lending limit,
all of nominal when unset) go into its cohort's pool and the rest is guaranteed to it alone.
Usage above the guaranteed part draws on the cohort's pool. A queue may use up to
`nominal + borrowingLimit` (no limit when unset) as long as the pool has room. When others have
taken pool capacity that a queue needs to reach its own nominal quota, it can reclaim it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpucarve.core.policy import Policy, Queue

SCALE = 1000


@dataclass(frozen=True, slots=True)
class QuotaVerdict:
    fits: bool
    message: str = ""
    flavor: str | None = None
    # Whether the failure is one reclaim can cure: the queue stays within nominal but the
    # cohort lent its share out.
    reclaimable: bool = False


@dataclass(frozen=True, slots=True)
class _Limits:
    nominal: int
    guaranteed: int
    lendable: int
    borrowing_limit: int | None


class Quotas:
    def __init__(self, policy: Policy, usage: dict[tuple[str, str], int]) -> None:
        self.usage = usage  # shared with Working, which records undo for it
        self.queues: dict[str, Queue] = {q.name: q for q in policy.queues}
        self.limits: dict[tuple[str, str], _Limits] = {}
        self.members: dict[str, list[str]] = {}
        self.pool: dict[tuple[str, str], int] = {}
        for q in policy.queues:
            if q.cohort is not None:
                self.members.setdefault(q.cohort, []).append(q.name)
            for quota in q.quotas:
                lendable = quota.nominal if quota.lending_limit is None else quota.lending_limit
                lim = _Limits(
                    quota.nominal, quota.nominal - lendable, lendable, quota.borrowing_limit
                )
                self.limits[(q.name, quota.flavor)] = lim
                if q.cohort is not None:
                    key = (q.cohort, quota.flavor)
                    self.pool[key] = self.pool.get(key, 0) + lendable

    def has_quota(self, queue: str, flavor: str) -> bool:
        return (queue, flavor) in self.limits

    def used(self, queue: str, flavor: str) -> int:
        return self.usage.get((queue, flavor), 0)

    def nominal(self, queue: str, flavor: str) -> int:
        lim = self.limits.get((queue, flavor))
        return 0 if lim is None else lim.nominal

    def pool_used(self, cohort: str, flavor: str) -> int:
        total = 0
        for q in self.members.get(cohort, ()):
            lim = self.limits.get((q, flavor))
            if lim is not None:
                total += max(0, self.used(q, flavor) - lim.guaranteed)
        return total

    def borrowed(self, queue: str, flavor: str) -> int:
        return max(0, self.used(queue, flavor) - self.nominal(queue, flavor))

    def check(self, queue: str, demand: Mapping[str, int]) -> QuotaVerdict:
        q = self.queues[queue]
        for flavor, d in sorted(demand.items()):
            lim = self.limits.get((queue, flavor))
            if lim is None:
                return QuotaVerdict(False, f"queue {queue} has no quota for {flavor}", flavor)
            used = self.used(queue, flavor)
            new = used + d
            if q.cohort is None:
                if new > lim.nominal:
                    return QuotaVerdict(
                        False,
                        f"queue {queue} at {used}/{lim.nominal} {flavor}, needs {d} more "
                        "and is in no cohort to borrow from",
                        flavor,
                    )
                continue
            borrow = new - lim.nominal
            if lim.borrowing_limit is not None and borrow > lim.borrowing_limit:
                return QuotaVerdict(
                    False,
                    f"queue {queue} at {used}/{lim.nominal} {flavor}, needs {d} more; "
                    f"borrowing limit {lim.borrowing_limit}",
                    flavor,
                )
            pool = self.pool.get((q.cohort, flavor), 0)
            pool_used = self.pool_used(q.cohort, flavor)
            delta = max(0, new - lim.guaranteed) - max(0, used - lim.guaranteed)
            if pool_used + delta > pool:
                free = max(0, pool - pool_used)
                return QuotaVerdict(
                    False,
                    f"queue {queue} at {used}/{lim.nominal} {flavor}, needs {d} more; "
                    f"cohort {q.cohort} has {free} to lend",
                    flavor,
                    reclaimable=new <= lim.nominal,
                )
        return QuotaVerdict(True)

    def fair_share(self, queue: str) -> int:
        """Dominant share of what the queue borrows, over its weight (lower goes first)."""
        q = self.queues[queue]
        if q.cohort is None:
            return 0
        share = 0
        for quota in q.quotas:
            borrowed = self.borrowed(queue, quota.flavor)
            if borrowed:
                pool = max(1, self.pool.get((q.cohort, quota.flavor), 0))
                share = max(share, borrowed * SCALE * SCALE // pool)
        return share * SCALE // max(1, q.weight_milli)
