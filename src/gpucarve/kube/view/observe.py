"""What the scheduler's metrics need from a cycle beyond the engine's result: the workloads
that wait outside it (pods no workload can be made of, gangs short of pods, admissions waiting
for their victims), each with its queue and reason stage."""

from __future__ import annotations

from collections.abc import Mapping

from gpucarve.core.policy import Policy
from gpucarve.kube.view.cluster_view import View


def queue_of_namespace(policy: Policy, namespace: str) -> str:
    for q in policy.queues:
        if namespace in q.namespaces:
            return q.name
    return "none"  # a namespace no queue serves: still one bounded label


def outside_the_cycle(
    policy: Policy, view: View, waiting: Mapping[str, frozenset[str]]
) -> list[tuple[str, str]]:
    """(queue, reason stage) of each workload waiting outside the engine's cycle."""
    out: list[tuple[str, str]] = []
    groups: dict[str, str] = {}
    for pod, why in view.invalid.items():
        # one per gang: a gang's pods share their message, which names the group
        key = why if why.startswith("gang/") else pod
        groups.setdefault(key, pod)
    for key, pod in groups.items():
        stage = "gang" if key.startswith("gang/") else "validation"
        out.append((queue_of_namespace(policy, pod.partition("/")[0]), stage))
    queues = {w.id: w.queue for w in view.snapshot.pending}
    out += [(queues[w], "preemption") for w in waiting if w in queues]
    return out
