"""Cohorts: their tree (`parent:`), their own quotas, checked and built.

A cohort's `parent` must be declared and the parents must not loop (the error prints the loop
and where to cut it); a cohort's quota keys are flavors or GPU units, like a queue's; a limit
on a root cohort has nothing to borrow from or lend to; a lending limit past what the cohort
holds (its own nominal and what its members lend it) can never be reached.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpucarve.config.quota_build import check_quota, quota_of, suggest
from gpucarve.core.amounts import FlavorName, QuotaKey
from gpucarve.core.cohort_tree import cohort_tree
from gpucarve.core.policy import Cohort, Flavor, GpuUnit, Policy
from gpucarve.core.problems import Path, Problem, Severity

from .policy_model import CohortSpec, PolicySpec


def cohort_checks(
    spec: PolicySpec, flavors: Mapping[FlavorName, Flavor], units: Mapping[QuotaKey, GpuUnit]
) -> list[Problem]:
    names = [c.name for c in spec.cohorts]
    parents = {c.name: c.parent for c in spec.cohorts}
    out: list[Problem] = []
    for i, c in enumerate(spec.cohorts):
        path: Path = ("cohorts", i)
        if c.parent is not None and c.parent not in parents:
            out.append(
                Problem(
                    (*path, "parent"),
                    "unknown-cohort",
                    f"cohort {c.name} sits in cohort {c.parent!r}, which `cohorts:` does not "
                    "declare",
                    "declare it under `cohorts:` or fix the name; " + suggest(c.parent, names),
                )
            )
        loop = _loop(c.name, parents)
        if loop and loop[0] == min(loop):  # each loop once, from its first name
            out.append(
                Problem(
                    (*path, "parent"),
                    "cohort-cycle",
                    "cohorts sit in each other: " + " → ".join([*loop, loop[0]]),
                    f"remove `parent:` from one of them (e.g. cohort {loop[0]}) to make it "
                    "the root",
                )
            )
        out += _quota_checks(path, c, flavors, units)
    out += _lonely(spec)
    return out


def _loop(name: str, parents: Mapping[str, str | None]) -> list[str]:
    """The cohorts of the parent loop `name` is on (empty when its chain ends)."""
    seen: list[str] = []
    at: str | None = name
    while at is not None and at not in seen:
        seen.append(at)
        at = parents.get(at)
    if at != name:
        return []
    return seen


def _quota_checks(
    path: Path,
    c: CohortSpec,
    flavors: Mapping[FlavorName, Flavor],
    units: Mapping[QuotaKey, GpuUnit],
) -> list[Problem]:
    out: list[Problem] = []
    for key, quota in c.quota.items():
        qpath = (*path, "quota", key)
        out += check_quota(qpath, QuotaKey(key), quota, flavors, units, lends_only_nominal=False)
        for name, value in (
            ("borrowingLimit", quota.borrowingLimit),
            ("lendingLimit", quota.lendingLimit),
        ):
            if value is not None and c.parent is None:
                out.append(
                    Problem(
                        (*qpath, name),
                        "limit-without-parent",
                        f"{name} has no effect: cohort {c.name} is a root (no `parent:`), "
                        "with nothing to borrow from or lend to",
                        "add `parent:` to the cohort or remove the limit",
                    )
                )
    return out


def _lonely(spec: PolicySpec) -> list[Problem]:
    members: dict[str, list[str]] = {c.name: [] for c in spec.cohorts}
    for q in spec.queues:
        if q.cohort in members:
            members[q.cohort].append(f"queue {q.name}")
    for c in spec.cohorts:
        if c.parent in members:
            members[c.parent].append(f"cohort {c.name}")
    out: list[Problem] = []
    for i, c in enumerate(spec.cohorts):
        mine = members[c.name]
        if len(mine) < 2 and not (mine and c.quota):
            who = f"only {mine[0]}" if mine else "no queue"
            out.append(
                Problem(
                    ("cohorts", i),
                    "lonely-cohort",
                    f"cohort {c.name} has {who}: nothing can be lent or borrowed in it",
                    "add queues to it (`cohort:` on a queue, `parent:` on a cohort) or remove it",
                    Severity.WARNING,
                )
            )
    return out


def build_cohort(c: CohortSpec, units: Mapping[QuotaKey, GpuUnit]) -> Cohort:
    return Cohort(
        name=c.name,
        description=c.description,
        parent=c.parent,
        quotas=tuple(quota_of(QuotaKey(k), s, units) for k, s in sorted(c.quota.items())),
        weight_milli=round(c.weight * 1000),
        reclaim_for_members=c.reclaimForMembers,
    )


def tree_checks(policy: Policy) -> list[Problem]:
    """Limits the built tree can never reach: a lending limit past what the cohort holds."""
    tree = cohort_tree(policy)
    out: list[Problem] = []
    for i, c in enumerate(policy.cohorts):
        for quota in c.quotas:
            most = quota.lending_limit.most
            held = tree.level(c.name, quota.flavor).subtree
            if most is None or most <= held:
                continue
            unit = policy.units.get(quota.flavor)
            text = str if unit is None else unit.gpus_text
            out.append(
                Problem(
                    ("cohorts", i, "quota", quota.flavor, "lendingLimit"),
                    "out-of-range",
                    f"lendingLimit {text(most)} of cohort {c.name} exceeds the {text(held)} it "
                    "holds (its own nominal and what its members lend it): a cohort can only "
                    "lend what it has",
                    f"use lendingLimit ≤ {text(held)}, or raise its nominal",
                )
            )
    return out
