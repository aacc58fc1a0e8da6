"""What a GPU fault is, what it does to the work on the GPU and what brings the GPU back: the
fault classes, and which faults a pool takes out of service at once.

The classes follow NVIDIA's XID catalogue and its GPU memory error-management guide: an XID
that only a reset clears (48 double-bit ECC, 74 NVLink, 94/95 contained/uncontained ECC) is
remediated by a GPU reset once nothing holds the GPU; 63 (a row remap or page retirement
pending) takes effect at the next reset, so the work on the GPU may finish first; 64 (a remap
that failed) and a GPU whose uncorrected errors over its life reach the limit need the GPU
serviced, so they stay out until a person acts; 79 (fallen off the bus) and a GPU NVML no
longer sees need the node rebooted. Heat waits for the GPU to cool; throttling is reported and
takes nothing out. The policy's `gpuHealth.classes` changes a class's action or drain.

A pool's budget (`gpuHealth.maxOutOfService`) bounds how many of its GPUs are out of service
at once, so a fleet-wide event (a bad driver, a false alarm) cannot take a pool down: faults are
taken out in the order they were seen, and those past the budget are reported and left in
service. A GPU that cannot run work at all (a fatal class) is out whatever the budget, and
counts towards it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum


class Action(StrEnum):
    RESET = "reset"  # the agent resets the GPU once no process holds it
    REBOOT = "reboot"  # the agent asks for a node reboot (a node condition)
    REPLACE = "replace"  # out until a person clears it: the GPU needs service
    WAIT = "wait"  # back by itself once its checks are clean again
    REPORT = "report"  # reported only: never out of service


class Drain(StrEnum):
    EVICT = "evict"  # running pods are evicted (within their budgets and grace)
    FINISH = "finish"  # running pods finish; only new work stops


class Severity(StrEnum):
    FATAL = "fatal"  # the GPU runs nothing: out whatever the pool's budget
    CRITICAL = "critical"
    WARNING = "warning"


@dataclass(frozen=True, slots=True)
class FaultClass:
    name: str
    severity: Severity
    action: Action
    drain: Drain
    xids: tuple[int, ...] = ()
    about: str = ""

    @property
    def out_of_service(self) -> bool:
        return self.action is not Action.REPORT


A, D, S = Action, Drain, Severity
CATALOGUE: tuple[FaultClass, ...] = (
    FaultClass("fallen-off-bus", S.FATAL, A.REBOOT, D.EVICT, (79,),
               "XID 79: the GPU fell off the bus; a node reboot brings it back"),
    FaultClass("device-lost", S.FATAL, A.REBOOT, D.EVICT, (),
               "NVML no longer sees the GPU"),
    FaultClass("uncontained-memory", S.CRITICAL, A.RESET, D.EVICT, (95,),
               "XID 95: an uncontained ECC error; every process on the GPU is hit"),
    FaultClass("contained-memory", S.CRITICAL, A.RESET, D.FINISH, (94,),
               "XID 94: a contained ECC error; the process that hit it was stopped"),
    FaultClass("memory-uncorrected", S.CRITICAL, A.RESET, D.EVICT, (48,),
               "XID 48 or new uncorrected (double-bit) ECC errors"),
    FaultClass("remap-pending", S.CRITICAL, A.RESET, D.FINISH, (63,),
               "XID 63 or rows/pages waiting for a reset to be remapped or retired"),
    FaultClass("remap-failed", S.CRITICAL, A.REPLACE, D.EVICT, (64,),
               "XID 64: a row remap failed; the GPU needs service"),
    FaultClass("nvlink", S.CRITICAL, A.RESET, D.EVICT, (74,),
               "XID 74 or new NVLink recovery errors"),
    FaultClass("memory-worn", S.CRITICAL, A.REPLACE, D.FINISH, (),
               "uncorrected ECC errors over the GPU's life at the policy's limit"),
    FaultClass("other-xid", S.CRITICAL, A.RESET, D.EVICT, (),
               "a critical XID of the policy's list that no class names"),
    FaultClass("thermal", S.WARNING, A.WAIT, D.FINISH, (),
               "at or over its temperature limit"),
    FaultClass("throttled", S.WARNING, A.REPORT, D.FINISH, (),
               "clocks held down by hardware slowdown, thermal or power brake"),
)  # fmt: skip
CLASSES: Mapping[str, FaultClass] = {c.name: c for c in CATALOGUE}


def class_of_xid(code: int, classes: Mapping[str, FaultClass]) -> FaultClass:
    for c in classes.values():
        if code in c.xids:
            return c
    return classes["other-xid"]


def class_named(name: str, classes: Mapping[str, FaultClass]) -> FaultClass:
    """A class by name; one this version does not know (an agent of another version wrote
    it) is handled as an unclassed critical XID."""
    return classes.get(name) or classes["other-xid"]


@dataclass(frozen=True, slots=True)
class Fault:
    """A fault the node agent reports on one GPU (`node/gpuN`)."""

    gpu: str
    reason: str
    fault_class: str
    since: int  # Unix seconds, when the agent first saw it
    reset: bool = False  # the agent has reset the GPU for it


@dataclass(frozen=True, slots=True)
class Budget:
    """At most `gpus` or `percent` of a pool's GPUs out of service at once (the smaller,
    where both are set; at least one GPU)."""

    gpus: int | None = None
    percent: int | None = 50

    def of(self, pool_gpus: int) -> int:
        caps = [self.gpus] if self.gpus is not None else []
        if self.percent is not None:
            caps.append(pool_gpus * self.percent // 100)
        return max(1, min(caps)) if caps else pool_gpus


def out_of_service(
    faults: Mapping[str, Fault],
    pool_of: Mapping[str, str],
    pool_gpus: Mapping[str, int],
    classes: Mapping[str, FaultClass],
    budget: Budget,
) -> tuple[dict[str, Fault], dict[str, Fault]]:
    """(out of service, left in service past the budget), GPU -> its fault. Fatal faults
    first, then in the order seen (ties by GPU name), so the answer is the same on every
    replica and every cycle while the faults stand."""
    out: dict[str, Fault] = {}
    held: dict[str, Fault] = {}
    taken: dict[str, int] = {}

    def order(f: Fault) -> tuple[bool, int, str]:
        return (class_named(f.fault_class, classes).severity is not Severity.FATAL, f.since, f.gpu)

    for f in sorted(faults.values(), key=order):
        c = class_named(f.fault_class, classes)
        if not c.out_of_service:
            continue
        pool = pool_of.get(f.gpu, "")
        cap = budget.of(pool_gpus.get(pool, 1))
        if c.severity is Severity.FATAL or taken.get(pool, 0) < cap:
            out[f.gpu] = f
            taken[pool] = taken.get(pool, 0) + 1
        else:
            held[f.gpu] = f
    return dict(sorted(out.items())), dict(sorted(held.items()))
