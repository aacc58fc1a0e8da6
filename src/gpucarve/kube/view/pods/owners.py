"""Gangs of the workloads users submit, found without a PodGroup: from the labels, annotations
and owner references their controllers put on the pods (as KAI's pod grouper and Kueue's
integrations do), so a training job written for the default scheduler is placed all or
nothing. The names and helpers each kind uses; the kinds themselves, in order, are the
registry in `owner_kinds`.

- a pod group label: the label's value; minMember from its PodGroup, else all its pods;
- LeaderWorkerSet (`leaderworkerset.sigs.k8s.io/name` and `group-index`): `lws-<name>-<group>`
  (a leader and its workers), as many as the `leaderworkerset.sigs.k8s.io/size` annotation;
- JobSet (`jobset.sigs.k8s.io/jobset-name`; a Kubeflow TrainJob runs as one): `jobset-<name>`,
  the sum of its Jobs' gang sizes (below), else all its pods;
- Kubeflow training operator (PyTorchJob, TFJob, MPIJob: `training.kubeflow.org/job-name`):
  the job's name, which is the name the operator gives its PodGroup; else all its pods;
- RayCluster (`ray.io/cluster`): `raycluster-<name>`, head and workers; workers added later
  join it;
- batch/v1 Job (owner reference and `batch.kubernetes.io/job-name`) whose completions equal
  its parallelism (> 1): `job-<name>`, parallelism pods.

Other pods, Deployments' and StatefulSets' included, are a workload each (an elastic service:
replicas come and go one by one), in their namespace's queue. A Job of independent pods (a
work queue: completions unset or above parallelism) is not a gang either; nor is any pod that
carries the annotation `gpucarve.io/gang: "false"`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpucarve.core.vocabulary import GANG_ANNOTATION
from gpucarve.kube.view.pods.group_spec import GroupSpec

JOB_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"
JOBSET_JOBS = "jobset.sigs.k8s.io/global-replicas"  # how many Jobs the JobSet has
KUBEFLOW_LABEL = "training.kubeflow.org/job-name"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
LWS_SIZE_ANNOTATION = "leaderworkerset.sigs.k8s.io/size"
RAY_CLUSTER_LABEL = "ray.io/cluster"
MAX_GANG = 100_000  # as the PodGroup CRD's minMember


def positive_int(raw: object) -> int | None:
    """A count from an object's field, label or annotation; None unless 1..100,000."""
    try:
        n = int(str(raw))
    except ValueError:
        return None
    return n if 1 <= n <= MAX_GANG else None


def owned_by_job(meta: Mapping[str, Any]) -> str | None:
    for ref in meta.get("ownerReferences") or []:
        if ref.get("kind") == "Job" and str(ref.get("apiVersion", "")).startswith("batch/"):
            return str(ref.get("name") or "") or None
    return None


def gang_size(job: Mapping[str, Any]) -> int | None:
    """How many pods of a batch/v1 Job start together: its parallelism when every one of
    them must complete (completions = parallelism); None for a Job of independent pods."""
    spec = job.get("spec") or {}
    parallelism = positive_int(spec.get("parallelism", 1))
    completions = spec.get("completions")
    if parallelism is None or parallelism < 2 or positive_int(completions) != parallelism:
        return None
    template = (spec.get("template") or {}).get("metadata") or {}
    if str((template.get("annotations") or {}).get(GANG_ANNOTATION, "")).lower() == "false":
        return None
    return parallelism


def deadline_of(job: Mapping[str, Any]) -> int | None:
    """A Job's activeDeadlineSeconds (None: none, or not a whole number of seconds a pod's
    deadline could be)."""
    raw = (job.get("spec") or {}).get("activeDeadlineSeconds")
    return raw if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 1 else None


def job_specs(jobs: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], GroupSpec]:
    """Gang sizes of Jobs and of JobSets (the sum of their Jobs'), by the gang names of
    `owner_kinds.group_of`. A JobSet whose Jobs are not all created yet (it says how many it
    has: label or annotation `jobset.sigs.k8s.io/global-replicas`) counts one pod for each Job
    still to come, so its first pods wait for the rest. A JobSet with a Job of independent pods
    gets none: its gang is the pods it has."""
    out: dict[tuple[str, str], GroupSpec] = {}
    jobsets: dict[tuple[str, str], list[int | None]] = {}  # pods per Job (None: independent)
    expected: dict[tuple[str, str], int] = {}
    deadlines: dict[tuple[str, str], int] = {}  # a JobSet's: the least of its Jobs'
    for job in jobs:
        meta = job["metadata"]
        ns, labels = meta["namespace"], meta.get("labels") or {}
        size = gang_size(job)
        if jobset := labels.get(JOBSET_LABEL):
            key = (ns, f"jobset-{jobset}")
            parallelism = positive_int((job.get("spec") or {}).get("parallelism", 1)) or 1
            jobsets.setdefault(key, []).append(size or (1 if parallelism == 1 else None))
            if (d := deadline_of(job)) is not None:
                deadlines[key] = min(d, deadlines.get(key, d))
            said = labels.get(JOBSET_JOBS) or (meta.get("annotations") or {}).get(JOBSET_JOBS)
            if (n := positive_int(said)) is not None:
                expected[key] = n
        elif size is not None:
            out[(ns, f"job-{meta['name']}")] = GroupSpec(size, deadline_s=deadline_of(job))
    for key, sizes in jobsets.items():
        if any(s is None for s in sizes):
            continue
        total = sum(s for s in sizes if s is not None)
        total += max(0, expected.get(key, 0) - len(sizes))
        if total > 1:
            out[key] = GroupSpec(min(total, MAX_GANG), deadline_s=deadlines.get(key))
    return out
