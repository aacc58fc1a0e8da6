"""The scheduling engine: one pure, deterministic cycle shared by the simulator and the
Kubernetes scheduler.

This module is the engine's face: outside the engine, only it and `decisions`, `explain` and
`invariants` are imported (an import-linter contract holds it). A name here never
is that of a module of the engine (`apply_cycle`, not `apply`): the contract would read it as
the module. What the drivers, the webhook,
status, the dashboard and metrics ask of the engine is here.

The face loads what is asked of it when it is first asked (PEP 562): a command that needs only
the engine's registries (`validate` checks the policy's score and victim-order names) loads
those modules, not the whole engine.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpucarve.engine.apply import apply as apply_cycle
    from gpucarve.engine.apply import apply_in, derive, finish, finish_in, usage_moved_on
    from gpucarve.engine.decisions import (
        Admission,
        Cause,
        CycleResult,
        Eviction,
        Pending,
        PendingReason,
        Stage,
    )
    from gpucarve.engine.engine import Engine, Held, run_cycle, run_whole_cycle
    from gpucarve.engine.gang_timeout import gang_gpus
    from gpucarve.engine.mig.gpu_plan import PoolGpu
    from gpucarve.engine.mig.pool_plan import plan_pool
    from gpucarve.engine.oracle import Oracle
    from gpucarve.engine.placement.frag_place import near_best
    from gpucarve.engine.placement.fragment import FragmentModel, Reach, RequestType
    from gpucarve.engine.placement.fragment import model_of as fragment_model_of
    from gpucarve.engine.placement.one_by_one import OneByOne
    from gpucarve.engine.placement.plugins import score_names
    from gpucarve.engine.quota import SCALE, Quotas
    from gpucarve.engine.stranded import fewest_slices, group_of, smallest_needs, stranded_slices
    from gpucarve.engine.usage import allocated_after, evicted_pods, usage_after
    from gpucarve.engine.victims import victim_order_names

# name -> (module, name there)
_WHERE: dict[str, tuple[str, str]] = {
    "Admission": ("gpucarve.engine.decisions", "Admission"),
    "Cause": ("gpucarve.engine.decisions", "Cause"),
    "CycleResult": ("gpucarve.engine.decisions", "CycleResult"),
    "Engine": ("gpucarve.engine.engine", "Engine"),
    "Eviction": ("gpucarve.engine.decisions", "Eviction"),
    "FragmentModel": ("gpucarve.engine.placement.fragment", "FragmentModel"),
    "Held": ("gpucarve.engine.engine", "Held"),
    "OneByOne": ("gpucarve.engine.placement.one_by_one", "OneByOne"),
    "Oracle": ("gpucarve.engine.oracle", "Oracle"),
    "Pending": ("gpucarve.engine.decisions", "Pending"),
    "PendingReason": ("gpucarve.engine.decisions", "PendingReason"),
    "PoolGpu": ("gpucarve.engine.mig.gpu_plan", "PoolGpu"),
    "Quotas": ("gpucarve.engine.quota", "Quotas"),
    "Reach": ("gpucarve.engine.placement.fragment", "Reach"),
    "RequestType": ("gpucarve.engine.placement.fragment", "RequestType"),
    "SCALE": ("gpucarve.engine.quota", "SCALE"),
    "Stage": ("gpucarve.engine.decisions", "Stage"),
    "allocated_after": ("gpucarve.engine.usage", "allocated_after"),
    "apply_cycle": ("gpucarve.engine.apply", "apply"),
    "apply_in": ("gpucarve.engine.apply", "apply_in"),
    "derive": ("gpucarve.engine.apply", "derive"),
    "evicted_pods": ("gpucarve.engine.usage", "evicted_pods"),
    "fewest_slices": ("gpucarve.engine.stranded", "fewest_slices"),
    "finish": ("gpucarve.engine.apply", "finish"),
    "finish_in": ("gpucarve.engine.apply", "finish_in"),
    "fragment_model_of": ("gpucarve.engine.placement.fragment", "model_of"),
    "gang_gpus": ("gpucarve.engine.gang_timeout", "gang_gpus"),
    "group_of": ("gpucarve.engine.stranded", "group_of"),
    "near_best": ("gpucarve.engine.placement.frag_place", "near_best"),
    "plan_pool": ("gpucarve.engine.mig.pool_plan", "plan_pool"),
    "run_cycle": ("gpucarve.engine.engine", "run_cycle"),
    "run_whole_cycle": ("gpucarve.engine.engine", "run_whole_cycle"),
    "score_names": ("gpucarve.engine.placement.plugins", "score_names"),
    "smallest_needs": ("gpucarve.engine.stranded", "smallest_needs"),
    "stranded_slices": ("gpucarve.engine.stranded", "stranded_slices"),
    "usage_after": ("gpucarve.engine.usage", "usage_after"),
    "usage_moved_on": ("gpucarve.engine.apply", "usage_moved_on"),
    "victim_order_names": ("gpucarve.engine.victims", "victim_order_names"),
}


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(where[0]), where[1])
    globals()[name] = value  # asked once
    return value


__all__ = [
    "SCALE",
    "Admission",
    "Cause",
    "CycleResult",
    "Engine",
    "Eviction",
    "FragmentModel",
    "Held",
    "OneByOne",
    "Oracle",
    "Pending",
    "PendingReason",
    "PoolGpu",
    "Quotas",
    "Reach",
    "RequestType",
    "Stage",
    "allocated_after",
    "apply_cycle",
    "apply_in",
    "derive",
    "evicted_pods",
    "fewest_slices",
    "finish",
    "finish_in",
    "fragment_model_of",
    "gang_gpus",
    "group_of",
    "near_best",
    "plan_pool",
    "run_cycle",
    "run_whole_cycle",
    "score_names",
    "smallest_needs",
    "stranded_slices",
    "usage_after",
    "usage_moved_on",
    "victim_order_names",
]
