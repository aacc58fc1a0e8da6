"""The static shape of a policy's cohort tree: what each cohort holds of each quota key.

Per quota key (a flavor, or a GPU unit), a queue's *subtree* quota is its nominal; a cohort's is
its own nominal plus what each member lends it (a queue's or child cohort's subtree, capped by
its lending limit). What a member does not lend is *guaranteed* to it: its usage past that
part is what it draws from its parent. A cohort borrows from its parent up to its borrowing
limit. So capacity is looked for closest first: a queue's unused quota serves its own cohort
before it reaches the cohort's parent, and a department's unused quota serves its own teams
before another department. A flat policy (cohorts without parents or quotas) gives each cohort
the sum of its queues' lendable quota, as before.

The tree is checked when the policy is built (`config.cohort_build`): no cycles, parents that
exist; here every cohort's parent chain ends.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpucarve.core.amounts import UNLIMITED, Bound, QuotaKey
from gpucarve.core.policy import Policy


@dataclass(frozen=True, slots=True)
class Level:
    """One node of the tree in one quota key."""

    subtree: int  # what it holds: own nominal plus what its members lend it
    lendable: int  # what of that it lends its parent
    borrowing_limit: Bound = UNLIMITED

    @property
    def guaranteed(self) -> int:
        return self.subtree - self.lendable


@dataclass
class CohortTree:
    parent: dict[str, str | None] = field(default_factory=dict)  # cohort -> parent cohort
    queues: dict[str, list[str]] = field(default_factory=dict)  # cohort -> its queues
    children: dict[str, list[str]] = field(default_factory=dict)  # cohort -> child cohorts
    levels: dict[tuple[str, QuotaKey], Level] = field(default_factory=dict)  # (cohort, key)
    weight_milli: dict[str, int] = field(default_factory=dict)
    reclaim_for_members: dict[str, bool] = field(default_factory=dict)

    def path(self, cohort: str | None) -> tuple[str, ...]:
        """`cohort` and the cohorts above it, nearest first."""
        out: list[str] = []
        while cohort is not None and cohort not in out:
            out.append(cohort)
            cohort = self.parent.get(cohort)
        return tuple(out)

    def root(self, cohort: str) -> str:
        return self.path(cohort)[-1]

    def level(self, cohort: str, key: QuotaKey) -> Level:
        return self.levels.get((cohort, key), Level(0, 0))


def cohort_tree(policy: Policy) -> CohortTree:
    tree = CohortTree()
    for c in policy.cohorts:
        tree.parent[c.name] = c.parent
        tree.queues.setdefault(c.name, [])
        tree.children.setdefault(c.name, [])
        tree.weight_milli[c.name] = c.weight_milli
        tree.reclaim_for_members[c.name] = c.reclaim_for_members
    for c in policy.cohorts:
        if c.parent is not None and c.parent in tree.children:
            tree.children[c.parent].append(c.name)
    lent: dict[tuple[str, QuotaKey], int] = {}  # what members lend each cohort
    for q in policy.queues:
        if q.cohort is None or q.cohort not in tree.queues:
            continue
        tree.queues[q.cohort].append(q.name)
        for quota in q.quotas:
            k = (q.cohort, quota.flavor)
            lent[k] = lent.get(k, 0) + quota.lendable
    # deepest first, so that a cohort's members are summed before it lends them on
    order = sorted(policy.cohorts, key=lambda c: (-len(tree.path(c.name)), c.name))
    for c in order:
        keys = {k for (name, k) in lent if name == c.name} | {q.flavor for q in c.quotas}
        for key in sorted(keys):
            own = c.quota(key)
            subtree = lent.get((c.name, key), 0) + (0 if own is None else own.nominal)
            lending = UNLIMITED if own is None else own.lending_limit
            lendable = min(subtree, lending.or_else(subtree))
            limit = UNLIMITED if own is None else own.borrowing_limit
            tree.levels[(c.name, key)] = Level(subtree, lendable, limit)
            if c.parent is not None and c.parent in tree.queues:
                k = (c.parent, key)
                lent[k] = lent.get(k, 0) + lendable
    return tree


def tree_lines(policy: Policy) -> list[str]:
    """The cohort tree as `gpucarve validate` prints it: each cohort, indented under its
    parent, with what it holds and lends per quota key, then its queues."""
    tree = cohort_tree(policy)
    units = policy.units

    def amount(key: QuotaKey, n: int) -> str:
        unit = units.get(key)
        return str(n) if unit is None else unit.gpus_text(n)

    def figures(cohort: str) -> str:
        parts = []
        for (name, key), lvl in sorted(tree.levels.items()):
            if name != cohort:
                continue
            text = f"{key} holds {amount(key, lvl.subtree)}"
            if tree.parent.get(cohort) is not None:
                text += f", lends {amount(key, lvl.lendable)}"
                if lvl.borrowing_limit.most is not None:
                    text += f", borrows ≤ {amount(key, lvl.borrowing_limit.most)}"
            parts.append(text)
        return "; ".join(parts) or "holds nothing"

    out = ["cohort tree (what each cohort holds: its own quota and what its members lend it):"]

    def walk(cohort: str, depth: int) -> None:
        pad = "  " * (depth + 1)
        out.append(f"{pad}cohort {cohort}: {figures(cohort)}")
        for child in sorted(tree.children.get(cohort, ())):
            walk(child, depth + 1)
        queues = sorted(tree.queues.get(cohort, ()))
        if queues:
            out.append(f"{pad}  queues {', '.join(queues)}")

    for c in sorted(name for name, parent in tree.parent.items() if parent is None):
        walk(c, 0)
    return out
