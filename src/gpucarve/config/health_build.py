"""The policy's `gpuHealth` block, built and checked: fault classes by name, the pool budget."""

from __future__ import annotations

import dataclasses
import re

from gpucarve.config.policy_model import GpuHealthSpec
from gpucarve.config.quota_build import suggest
from gpucarve.core.gpu_faults import CATALOGUE, Action, Budget, Drain
from gpucarve.core.policy import GpuHealth
from gpucarve.core.problems import Problem

_PERCENT = re.compile(r"^(\d{1,3})%$")


def _budget(raw: int | str) -> Budget | Problem:
    path = ("gpuHealth", "maxOutOfService")
    fix = 'write a count of GPUs (4) or a percentage of the pool\'s GPUs ("25%")'
    if isinstance(raw, int):
        if raw < 1:
            return Problem(path, "out-of-range", f"must be ≥ 1, got {raw}", fix)
        return Budget(gpus=raw, percent=None)
    m = _PERCENT.match(raw.strip())
    if m is None or not 1 <= int(m.group(1)) <= 100:
        return Problem(path, "bad-budget", f"{raw!r} is not a count or a percentage 1–100%", fix)
    return Budget(gpus=None, percent=int(m.group(1)))


def gpu_health(spec: GpuHealthSpec) -> tuple[GpuHealth, list[Problem]]:
    problems: list[Problem] = []
    known = {c.name: c for c in CATALOGUE}
    for name in spec.classes:
        if name not in known:
            problems.append(
                Problem(
                    ("gpuHealth", "classes", name),
                    "unknown-fault-class",
                    f"there is no fault class {name!r}",
                    suggest(name, sorted(known)),
                )
            )
    classes = tuple(
        dataclasses.replace(
            c,
            action=Action(o.action) if (o := spec.classes.get(c.name)) and o.action else c.action,
            drain=Drain(o.drain) if o and o.drain else c.drain,
        )
        for c in CATALOGUE
    )
    budget = _budget(spec.maxOutOfService)
    if isinstance(budget, Problem):
        problems.append(budget)
        budget = Budget()
    health = GpuHealth(
        spec.checkSeconds,
        spec.temperatureCelsius,
        spec.memoryErrors,
        spec.cleanChecks,
        tuple(spec.xids),
        spec.taint,
        spec.evictPods,
        classes,
        budget,
        spec.flapLimit,
        spec.flapWindowSeconds,
    )
    return health, problems
