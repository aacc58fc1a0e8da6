"""An inference load that scales, for `gpucarve simulate`: each `autoscaling:` entry of the
policy is a Deployment whose replicas follow what its HPA would ask for.

Demand follows the synthetic trace's day (peak at 15:00, trough at 03:00) between the
entry's minimum and maximum replicas, with per-minute noise drawn from the seed. Each minute
the HPA's rules are applied as the controller applies them: the recommendation is the
replicas that keep the target (demand rounded up, within min and max); scale-up takes the
lowest recommendation of its stabilization window, scale-down the highest of its window;
at most max(2 pods, 100 %) more a minute and 1 fewer (the rendered HPA's policies). Each
replica is a workload of the entry's queue and priority class: submitted when it is scaled
up, running until it is scaled down (the newest goes first, as a ReplicaSet picks). A replica
that waits for a GPU still serves its whole stint once placed: the cost of waiting shows as
the queue's wait, not as lost demand.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Sequence

from gpucarve.config.workload_spec import build_workload
from gpucarve.core.policy import SCALE_DOWN_PODS, SCALE_UP_PODS, Autoscale, Policy
from gpucarve.core.problems import InvalidInput
from gpucarve.core.vocabulary import QUEUE_LABEL
from gpucarve.core.workload import Workload
from gpucarve.sim.traces.synthetic import rate_factor

STEP_S = 60  # the HPA controller's sync period is 15 s; a minute keeps traces small
NOISE = 0.15
AMPLITUDE = 0.5  # as the synthetic teams' arrival rate


def replica_schedule(a: Autoscale, span_s: int, seed: int) -> list[tuple[int, int]]:
    """(time, replicas) at each change, starting at (0, minReplicas)."""
    rng = random.Random(f"inference/{a.namespace}/{a.deployment}/{seed}")
    current = a.min_replicas
    out = [(0, current)]
    window: deque[tuple[int, int]] = deque()
    keep = max(a.up_window_s, a.down_window_s)
    for t in range(0, span_s, STEP_S):
        # rate_factor runs 0.5..1.5 over the day: 0 at the trough, 1 at the peak
        phase = (rate_factor(t, AMPLITUDE) - 1 + AMPLITUDE) / (2 * AMPLITUDE)
        demand = a.min_replicas + (a.max_replicas - a.min_replicas) * phase
        demand *= 1 + rng.uniform(-NOISE, NOISE)
        wanted = min(a.max_replicas, max(a.min_replicas, math.ceil(demand - 1e-9)))
        window.append((t, wanted))
        while len(window) > 1 and window[0][0] <= t - keep:
            window.popleft()
        up = min(r for at, r in window if at > t - a.up_window_s or at == t)
        down = max(r for at, r in window if at > t - a.down_window_s or at == t)
        new = current
        if up > current:
            new = min(up, current + max(SCALE_UP_PODS, current))
        elif down < current:
            new = max(down, current - SCALE_DOWN_PODS)
        if new != current:
            if out[-1][0] == t:
                out[-1] = (t, new)  # the first minute: the Deployment starts there
            else:
                out.append((t, new))
            current = new
    return out


def replica_workloads(
    policy: Policy, a: Autoscale, schedule: Sequence[tuple[int, int]], span_s: int
) -> list[Workload]:
    """The replicas of one schedule as workloads (each from its scale-up to its scale-down;
    those still up at the end run to `span_s`)."""
    running: list[tuple[int, int]] = []  # (start, serial), newest last
    stints: list[tuple[int, int, int]] = []  # (serial, start, end)
    serial = 0
    for t, replicas in schedule:
        while len(running) < replicas:
            serial += 1
            running.append((t, serial))
        while len(running) > replicas:
            start, k = running.pop()
            stints.append((k, start, t))
    stints += [(k, start, span_s) for start, k in running]
    gpu = dict(a.resources)
    out = []
    for k, start, end in sorted(stints):
        if end <= start:
            continue
        doc = {
            "name": f"{a.deployment}-replica-{k}",
            "namespace": a.namespace,
            "labels": {QUEUE_LABEL: a.queue},
            "submitTime": start,
            "duration": end - start,
            "podSets": [{"resources": {"requests": gpu, "limits": gpu}}],
        }
        if a.priority_class:
            doc["priorityClass"] = a.priority_class
        w, problems = build_workload(doc, policy)
        if w is None:
            raise InvalidInput(f"autoscaling {a.namespace}/{a.deployment}", problems)
        out.append(w)
    return out


def inference_load(
    policy: Policy, span_s: int, seed: int
) -> tuple[list[Workload], dict[str, float]]:
    """Every entry's replicas, and their GPU utilisation (the entry's target)."""
    workloads: list[Workload] = []
    utilisation: dict[str, float] = {}
    for a in policy.autoscaling:
        for w in replica_workloads(policy, a, replica_schedule(a, span_s, seed), span_s):
            workloads.append(w)
            utilisation[w.id] = float(a.gpu_util_percent)
    return workloads, utilisation
