"""The scheduling engine: one pure, deterministic cycle shared by the simulator and the
Kubernetes scheduler.

This module is the engine's face: outside the engine, only it and `decisions`, `explain` and
`invariants` are imported (an import-linter contract holds it). A name here never
is that of a module of the engine (`apply_cycle`, not `apply`): the contract would read it as
the module. What the drivers, the webhook,
status, the dashboard and metrics ask of the engine is here."""

from gpucarve.engine.apply import apply as apply_cycle
from gpucarve.engine.apply import apply_in, derive, finish, finish_in
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
from gpucarve.engine.preemption import victim_order_names
from gpucarve.engine.quota import SCALE, Quotas
from gpucarve.engine.stranded import fewest_slices, group_of, smallest_needs, stranded_slices
from gpucarve.engine.usage import allocated_after, evicted_pods, usage_after

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
    "victim_order_names",
]
