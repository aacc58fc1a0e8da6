"""What a pod group's object asks of its pods, and the labels by which pods name their group."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GroupSpec:
    """What a pod group's object (gpucarve's PodGroup, or the coscheduling plugin's) asks of
    its pods: how many start together, where, and how long the gang may take to be whole;
    `queue` and `priority_class` are claims its pods must agree with."""

    min_member: int
    topology: str = "none"
    timeout_s: int | None = None
    queue: str | None = None
    priority_class: str | None = None
    # Kubernetes' own PodGroup names its topology by node label keys, which only the policy's
    # topology keys turn into a mode (`pod_groups.resolve_topology`)
    topology_keys: tuple[str, ...] = ()
    # the owner's own bound on how long the gang runs (a Job's activeDeadlineSeconds; a
    # JobSet's, the least of its Jobs'): a runtime bound as a pod's own deadline is
    deadline_s: int | None = None
