"""The policies gpucarve is compared against, each a configuration of the same engine.

- `kube-default`: a cluster before sharing. Every GPU is a whole GPU (MIG and time-slicing
  pools become exclusive pools of the same GPUs, and a request for a MIG instance, a replica or a
  fraction asks for a whole GPU); no quotas; pods are placed one by one, first fit, in priority
  and arrival order, and pods of a gang hold their GPUs while the rest of the gang waits; no
  preemption.
- `static-quota`: the policy's pools and sharing modes, with each queue held to its nominal
  quota as a namespace ResourceQuota would (no cohorts, no borrowing), still pod by pod and
  first fit, without gangs or preemption.
- `gpucarve`: the policy as written.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from gpucarve.core.amounts import FlavorName, as_key
from gpucarve.core.policy import (
    Flavor,
    Policy,
    Pool,
    Queue,
    QueueingStrategy,
    Quota,
    SchedulingConfig,
    ScoringWeights,
    SharingMode,
)
from gpucarve.core.workload import GpuKind, GpuRequest, Workload

FIRST_FIT = ScoringWeights.of({})
NEVER = 10**9  # seconds: a head never starts holding its queue


def _with(
    policy: Policy, pools: Sequence[Pool], queues: Sequence[Queue], scheduling: SchedulingConfig
) -> Policy:
    flavors: dict[FlavorName, Flavor] = {}
    capacity: dict[FlavorName, int] = {}
    for pool in pools:
        for flavor, per_node in pool.flavor_slices_per_node():
            flavors[flavor.name] = flavor
            capacity[flavor.name] = capacity.get(flavor.name, 0) + per_node * pool.nodes
    return Policy(
        name=policy.name,
        description=policy.description,
        pools=tuple(pools),
        flavors=dict(sorted(flavors.items())),
        capacity=dict(sorted(capacity.items())),
        queues=tuple(queues),
        cohorts=(),
        priority_classes=policy.priority_classes,
        topology_keys=policy.topology_keys,
        scheduling=scheduling,
    )


def _pod_by_pod(policy: Policy) -> SchedulingConfig:
    return replace(
        policy.scheduling,
        queueing=QueueingStrategy.BEST_EFFORT_FIFO,
        max_head_wait_s=NEVER,
        preemption=False,
        scoring=FIRST_FIT,
        gang=False,
    )


def kube_default(policy: Policy) -> Policy:
    pools = [
        replace(p, sharing=SharingMode.EXCLUSIVE, replicas=1, mig_layouts=(), mig_dynamic=None)
        if p.sharing is not SharingMode.EXCLUSIVE
        else p
        for p in policy.pools
    ]
    shell = _with(policy, pools, (), _pod_by_pod(policy))
    # No quotas: every queue may use everything.
    queues = [
        replace(
            q,
            cohort=None,
            quotas=tuple(Quota(as_key(f), n) for f, n in shell.capacity.items()),
            max_per_workload=(),
            idleness=None,
        )
        for q in policy.queues
    ]
    return _with(policy, pools, queues, _pod_by_pod(policy))


def static_quota(policy: Policy) -> Policy:
    queues = [
        replace(
            q,
            cohort=None,
            quotas=tuple(Quota(x.flavor, x.nominal) for x in q.quotas),
            idleness=None,  # reclaiming idle GPUs is gpucarve's
        )
        for q in policy.queues
    ]
    # static layouts too: repartitioning on demand is gpucarve's
    pools = [replace(p, mig_dynamic=None) for p in policy.pools]
    return _with(policy, pools, queues, _pod_by_pod(policy))


def whole_gpus(workloads: Sequence[Workload]) -> list[Workload]:
    """Requests as they look on a cluster without sharing: a MIG instance, a replica or a
    fraction is a whole GPU."""
    out = []
    for w in workloads:
        sets = []
        for ps in w.pod_sets:
            gpu = ps.gpu
            # a DRA claim stays one: the same pools, carved into nothing
            if gpu.kind is GpuKind.MIG:
                gpu = GpuRequest(GpuKind.WHOLE, gpu.count, dra=gpu.dra)
            elif gpu.kind in (GpuKind.SHARED, GpuKind.FRACTION):
                gpu = GpuRequest(GpuKind.WHOLE, 1, dra=gpu.dra)
            sets.append(replace(ps, gpu=gpu))
        out.append(replace(w, pod_sets=tuple(sets)))
    return out


Baseline = tuple[Callable[[Policy], Policy], Callable[[Sequence[Workload]], list[Workload]]]

POLICIES: dict[str, Baseline] = {
    "kube-default": (kube_default, whole_gpus),
    "static-quota": (static_quota, list),
    "gpucarve": (lambda p: p, list),
}


def without_idleness(policy: Policy) -> Policy:
    """The policy with no queue's idleness rule: what its rules change is measured against
    this run of the same engine."""
    return replace(policy, queues=tuple(replace(q, idleness=None) for q in policy.queues))
