"""Which flavors can serve a GPU request, how many slices it takes, and what it is charged.

The one unit across sharing modes
---------------------------------
Quota is counted in slices of a flavor, and every slice is worth a physical share of its GPU:
its *charge* in milli-GPU is the larger of its compute share and its memory share (the
dominant-resource rule of DRF). A whole GPU is 1000; an A100-80GB 3g.40gb is max(3/7 of compute,
40192/81038 of memory) = 496; a 1g.10gb is max(142, 120) = 142; one of 8 time-slice replicas is
125. A fractional request is served by a shared flavor with as many replicas of one GPU as its
dominant share needs: 0.3 GPU on 8 replicas takes 3 replicas (375 milli), 20 GiB of a 48 GB L40S
takes 4 (its memory share is 451). So a milli-GPU means the same on every pool of a model, fair
share compares queues in that unit, and preemption weighs GPU-time lost in it.
"""

from __future__ import annotations

from gpucarve.core.amounts import FlavorName
from gpucarve.core.catalog import MILLI_PER_GPU
from gpucarve.core.policy import Flavor, Policy, SliceKind
from gpucarve.core.workload import GpuKind, GpuRequest

SHARED_KINDS = (SliceKind.TIME_SLICE, SliceKind.MPS)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def gpu_memory_of(policy: Policy, flavor: Flavor) -> int:
    for pool in policy.pools:
        if pool.model.id == flavor.model_id:
            return pool.model.memory_mib
    raise KeyError(flavor.model_id)


def charge_milli(flavor: Flavor, gpu_memory_mib: int) -> int:
    """What one slice of `flavor` is worth, in milli-GPU of its model (dominant share)."""
    memory_share = ceil_div(flavor.memory_mib * MILLI_PER_GPU, gpu_memory_mib)
    return min(MILLI_PER_GPU, max(flavor.compute_milli, memory_share))


def fraction_share(request: GpuRequest, gpu_memory_mib: int) -> int:
    """The dominant share of one GPU a fractional request asks for, in milli."""
    memory_share = ceil_div(request.memory_mib * MILLI_PER_GPU, gpu_memory_mib)
    return max(request.milli, memory_share)


def slices_per_pod(request: GpuRequest, flavor: Flavor, gpu_memory_mib: int) -> int:
    if request.kind is GpuKind.FRACTION:
        share = fraction_share(request, gpu_memory_mib)
        return max(1, ceil_div(share * flavor.replicas, MILLI_PER_GPU))
    return request.count


def slice_gpus(policy: Policy) -> dict[FlavorName, float]:
    """What one slice of each of the policy's flavors is worth in GPUs (its charge)."""
    return {
        f: charge_milli(fl, gpu_memory_of(policy, fl)) / 1000 for f, fl in policy.flavors.items()
    }


def pod_set_gpus(
    policy: Policy, request: GpuRequest, count: int, flavor: Flavor
) -> tuple[int, float]:
    """The slices `count` pods of `request` take of `flavor`, and what they are worth in GPUs."""
    memory = gpu_memory_of(policy, flavor)
    slices = slices_per_pod(request, flavor, memory) * count
    return slices, slices * charge_milli(flavor, memory) / 1000


def serves(request: GpuRequest, flavor: Flavor, gpu_memory_mib: int) -> bool:
    """Whether slices of `flavor` can hold the request at all (ignoring what is free)."""
    if request.dra != flavor.dra or (request.flavors and flavor.name not in request.flavors):
        return False
    if request.kind is GpuKind.WHOLE:
        # under the single MIG strategy an instance is what `nvidia.com/gpu: 1` gets, and on
        # an unrenamed time-slicing or MPS GPU a replica
        if flavor.unrenamed:
            return request.count <= flavor.replicas
        return flavor.kind is SliceKind.WHOLE or flavor.single
    if request.kind is GpuKind.MIG:
        # a single-strategy pool publishes no `nvidia.com/mig-*` resource for the kubelet
        return (
            flavor.kind is SliceKind.MIG and flavor.profile == request.profile and not flavor.single
        )
    if request.kind is GpuKind.SHARED:
        # an unrenamed pool publishes no `nvidia.com/gpu.shared` for the kubelet
        return (
            flavor.kind in SHARED_KINDS
            and request.count <= flavor.replicas
            and not flavor.unrenamed
        )
    if request.kind is GpuKind.FRACTION:
        return (
            flavor.kind in SHARED_KINDS
            and request.memory_mib <= gpu_memory_mib
            and fraction_share(request, gpu_memory_mib) <= MILLI_PER_GPU
        )
    return False


def candidate_flavors(policy: Policy, request: GpuRequest) -> list[Flavor]:
    """Flavors of the policy that can serve `request`, in name order."""
    if request.kind is GpuKind.NONE:
        return []
    return [f for f in policy.flavors.values() if serves(request, f, gpu_memory_of(policy, f))]
