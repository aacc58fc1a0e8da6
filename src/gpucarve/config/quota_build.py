"""Queue quotas: keyed by a flavor (whole slices) or by a GPU unit (a flavor prefix: GPUs of
one model however they are carved, fractions allowed), checked, and converted into the core's
integer counts (a unit's in its parts)."""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence

from gpucarve.core.amounts import Bound, FlavorName, QuotaKey, as_flavor
from gpucarve.core.policy import Flavor, GpuUnit, Quota
from gpucarve.core.problems import Path, Problem, Severity

from .policy_model import PolicySpec, QueueSpec, QuotaSpec

_FIELDS = ("nominal", "borrowingLimit", "lendingLimit")


def suggest(name: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.5)
    listing = ", ".join(sorted(choices)) or "(none)"
    return (f"did you mean {close[0]!r}? " if close else "") + f"known: {listing}"


def _parts(value: float, unit: GpuUnit) -> int | None:
    """`value` GPUs in the unit's parts, or None when it is no whole number of parts."""
    scaled = value * unit.parts_per_gpu
    whole = round(scaled)
    return whole if abs(scaled - whole) < 1e-9 else None


def check_quota(
    path: Path,
    key: QuotaKey,
    spec: QuotaSpec,
    flavors: Mapping[FlavorName, Flavor],
    units: Mapping[QuotaKey, GpuUnit],
    lends_only_nominal: bool = True,
) -> list[Problem]:
    """A quota's key and amounts; `lends_only_nominal`: a queue's, whose lending limit is
    bounded by its nominal (a cohort's lends what its members lend it too)."""
    own = as_flavor(key) in flavors  # a flavor's own key
    unit = None if own else units.get(key)
    if not own and unit is None:
        return [
            Problem(
                path,
                "unknown-flavor",
                f"no pool provides flavor {key!r}, and no pool's flavor prefix is {key!r} (a "
                "GPU unit)",
                suggest(key, [*flavors, *units]),
            )
        ]
    out: list[Problem] = []
    for name in _FIELDS:
        value = getattr(spec, name)
        if value is None:
            continue
        if unit is None and not isinstance(value, int):
            out.append(
                Problem(
                    (*path, name),
                    "not-whole-slices",
                    f"{name} {value} of flavor {key}: a flavor's quota counts whole slices",
                    f"use a whole number, or write the quota in GPUs under the unit "
                    f"{key.rsplit('-', 1)[0]!r} when that is the pool's flavor prefix",
                )
            )
        elif unit is not None and _parts(value, unit) is None:
            step = f"1/{unit.parts_per_gpu}"
            out.append(
                Problem(
                    (*path, name),
                    "not-whole-parts",
                    f"{name} {value} GPUs of unit {key}: its slices come in steps of {step} GPU",
                    f"use a multiple of {step} (e.g. {_nearest(value, unit)})",
                )
            )
    if lends_only_nominal and spec.lendingLimit is not None and spec.lendingLimit > spec.nominal:
        out.append(
            Problem(
                (*path, "lendingLimit"),
                "out-of-range",
                f"lendingLimit {spec.lendingLimit} exceeds nominal {spec.nominal}: a "
                "queue can only lend quota it has",
                f"use lendingLimit ≤ {spec.nominal}",
            )
        )
    return out


def _nearest(value: float, unit: GpuUnit) -> str:
    return unit.gpus_text(round(value * unit.parts_per_gpu))


def quota_of(key: QuotaKey, spec: QuotaSpec, units: Mapping[QuotaKey, GpuUnit]) -> Quota:
    unit = units.get(key)

    def count(value: float | None) -> int | None:
        if value is None:
            return None
        if unit is None:
            return int(value)
        parts = _parts(value, unit)
        assert parts is not None, "checked by check_quota"
        return parts

    nominal = count(spec.nominal)
    assert nominal is not None
    return Quota(key, nominal, Bound(count(spec.borrowingLimit)), Bound(count(spec.lendingLimit)))


def _unit_nominals(
    queues: list[QueueSpec], flavors: Mapping[FlavorName, Flavor], units: Mapping[QuotaKey, GpuUnit]
) -> dict[QuotaKey, list[tuple[str, int]]]:
    out: dict[QuotaKey, list[tuple[str, int]]] = {}
    for q in queues:
        for name, spec in q.quota.items():
            key = QuotaKey(name)
            if key in units and as_flavor(key) not in flavors:
                parts = _parts(spec.nominal, units[key])
                if parts is not None:
                    out.setdefault(key, []).append((q.name, parts))
    return out


def capacity_checks(
    spec: PolicySpec,
    flavors: Mapping[FlavorName, Flavor],
    capacity: Mapping[FlavorName, int],
    units: Mapping[QuotaKey, GpuUnit],
) -> list[Problem]:
    """Nominal quotas against what the pools hold: more is an error, less a warning (a slice
    in nobody's nominal quota is never admitted to: a cohort lends only what its members own)."""
    out: list[Problem] = []
    in_units = _unit_nominals(list(spec.queues), flavors, units)
    for name, asked in sorted(in_units.items()):
        unit = units[name]
        total = sum(n for _, n in asked)
        if total > unit.gpus * unit.parts_per_gpu:
            shares = ", ".join(f"{q} {unit.gpus_text(n)}" for q, n in asked)
            out.append(
                Problem(
                    ("queues",),
                    "quota-exceeds-capacity",
                    f"nominal quotas for unit {name} add up to {unit.gpus_text(total)} GPUs "
                    f"({shares}) but its pools hold {unit.gpus}",
                    f"lower the nominal quotas to a total ≤ {unit.gpus} GPUs, or add capacity",
                )
            )
    for flavor in sorted(flavors):
        asked = [
            (q.name, int(q.quota[flavor].nominal))
            for q in spec.queues
            if flavor in q.quota and isinstance(q.quota[flavor].nominal, int)
        ]
        total = sum(n for _, n in asked)
        # what units promise counts in slices of this flavor, as if all went to it
        via_units = sum(
            n // parts
            for name, unit_asked in in_units.items()
            if (parts := units[name].charge(flavor))
            for _, n in unit_asked
        )
        if total > capacity[flavor]:
            shares = ", ".join(f"{name} {n}" for name, n in asked)
            out.append(
                Problem(
                    ("queues",),
                    "quota-exceeds-capacity",
                    f"nominal quotas for {flavor} add up to {total} ({shares}) but the pools "
                    f"hold {capacity[flavor]}",
                    f"lower the nominal quotas to a total ≤ {capacity[flavor]}, or add capacity",
                )
            )
        elif total + via_units < capacity[flavor]:
            left = capacity[flavor] - total - via_units
            out.append(
                Problem(
                    ("queues",),
                    "quota-leaves-capacity-idle",
                    f"nominal quotas for {flavor} add up to {total + via_units} of the "
                    f"{capacity[flavor]} slices the pools hold: {left} can never be used"
                    if asked or via_units
                    else f"no queue has quota for {flavor}: its {capacity[flavor]} slices can "
                    "never be used",
                    f"give the {left} slices to a queue's nominal quota, or quota the pool's "
                    "GPUs as a unit (a cohort lends what its owner does not use)",
                    Severity.WARNING,
                )
            )
    return out
