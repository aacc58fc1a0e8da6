"""Validate a policy document completely and build the core `Policy` from it.

Every problem is collected (structure first, then meaning) so `gpucarve validate` can print
all of them at once. Entry points: `build_policy(data, catalog)` for an already-parsed mapping
(YAML file, CRD, test) and `load_policy(path)` for a file.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path as FsPath
from typing import Any

from pydantic import ValidationError

from gpucarve.config.autoscaling_build import build_autoscaling
from gpucarve.config.catalog_file import load_catalog
from gpucarve.config.cohort_build import build_cohort, cohort_checks, tree_checks
from gpucarve.config.health_build import gpu_health
from gpucarve.config.pool_build import build_pool
from gpucarve.config.pydantic_errors import problems_from
from gpucarve.config.yaml_source import YamlDocument, parse_yaml, read_yaml
from gpucarve.core.amounts import FlavorName, QuotaKey
from gpucarve.core.catalog import Catalog
from gpucarve.core.held_idle import IdleRule
from gpucarve.core.policy import (
    DEFAULT_SCORING,
    Flavor,
    GpuUnit,
    Minimize,
    Monitoring,
    Objective,
    Policy,
    Pool,
    PriorityClass,
    Queue,
    QueueingStrategy,
    SchedulingConfig,
    ScoringWeights,
    TopologyKeys,
    gpu_units,
)
from gpucarve.core.problems import InvalidInput, Path, Problem, errors
from gpucarve.engine import score_names, victim_order_names

from .policy_model import IdlenessSpec, PolicySpec, QueueSpec
from .quota_build import capacity_checks, check_quota, quota_of, suggest


@dataclass(frozen=True)
class LoadedPolicy:
    policy: Policy
    warnings: tuple[Problem, ...]
    document: YamlDocument | None = None


# namespaces Kubernetes itself runs in: no queue may govern them
SYSTEM_NAMESPACES = frozenset({"kube-system", "kube-public", "kube-node-lease"})


def _flavors(
    pools: Sequence[tuple[int, Pool]],
) -> tuple[dict[FlavorName, Flavor], dict[FlavorName, int], list[Problem]]:
    flavors: dict[FlavorName, Flavor] = {}
    owner: dict[str, str] = {}
    capacity: dict[FlavorName, int] = {}
    problems: list[Problem] = []
    for i, pool in pools:
        for flavor, per_node in pool.flavor_slices_per_node():
            known = flavors.get(flavor.name)
            if known is not None and known != flavor:
                problems.append(
                    Problem(
                        ("pools", i),
                        "flavor-conflict",
                        f"pool {pool.name} and pool {owner[flavor.name]} both provide flavor "
                        f"{flavor.name} but their slices differ ({_slice(flavor)} vs "
                        f"{_slice(known)}): a flavor must mean one thing",
                        "set `flavorPrefix` on one of the pools to give it its own flavors",
                    )
                )
                continue
            flavors[flavor.name] = flavor
            owner.setdefault(flavor.name, pool.name)
            if pool.mig_dynamic is not None and pool.model.mig is not None and flavor.profile:
                # a dynamic pool can carve every GPU into as many of a profile as fit
                most = next(
                    p.max_instances for p in pool.model.mig.profiles if p.name == flavor.profile
                )
                per_node = most * pool.gpus_per_node
            capacity[flavor.name] = capacity.get(flavor.name, 0) + per_node * pool.nodes
    return flavors, capacity, problems


def _slice(f: Flavor) -> str:
    single = " published as nvidia.com/gpu (single MIG strategy)" if f.single else ""
    return f"{f.model_id} {f.kind}" + (f" ×{f.replicas}" if f.replicas > 1 else "") + single


def _check_queue(
    i: int,
    q: QueueSpec,
    flavors: Mapping[FlavorName, Flavor],
    units: Mapping[QuotaKey, GpuUnit],
    cohorts: set[str],
    classes: set[str],
) -> list[Problem]:
    path: Path = ("queues", i)
    out: list[Problem] = []
    idle = q.idleness
    reclaim = idle.reclaimAfterSeconds if idle else None
    if idle and reclaim is not None and reclaim < idle.warnAfterSeconds:
        out.append(
            Problem(
                (*path, "idleness", "reclaimAfterSeconds"),
                "reclaim-before-warning",
                f"queue {q.name} reclaims idle work after {reclaim}s, before it is warned "
                f"({idle.warnAfterSeconds}s): its users would lose work they were never told "
                "about",
                "make reclaimAfterSeconds at least warnAfterSeconds",
            )
        )
    if q.cohort is not None and q.cohort not in cohorts:
        out.append(
            Problem(
                (*path, "cohort"),
                "unknown-cohort",
                f"queue {q.name} joins cohort {q.cohort!r}, which `cohorts:` does not declare",
                "declare it under `cohorts:` or fix the name; "
                + suggest(q.cohort, sorted(cohorts)),
            )
        )
    for flavor, quota in q.quota.items():
        fpath = (*path, "quota", flavor)
        out += check_quota(fpath, QuotaKey(flavor), quota, flavors, units)
        for key, value in (
            ("borrowingLimit", quota.borrowingLimit),
            ("lendingLimit", quota.lendingLimit),
        ):
            if value is not None and q.cohort is None:
                out.append(
                    Problem(
                        (*fpath, key),
                        "limit-without-cohort",
                        f"{key} has no effect: queue {q.name} is in no cohort",
                        "add `cohort:` to the queue or remove the limit",
                    )
                )
    for flavor, most in q.maxPerWorkload.items():
        mpath = (*path, "maxPerWorkload", flavor)
        if flavor not in flavors:
            out.append(
                Problem(
                    mpath,
                    "unknown-flavor",
                    f"no pool provides flavor {flavor!r}",
                    suggest(flavor, sorted(flavors)),
                )
            )
        if most < 1:
            out.append(
                Problem(mpath, "out-of-range", f"must be ≥ 1, got {most}", "use a positive count")
            )
    for j, name in enumerate(q.priorityClasses):
        if name not in classes:
            out.append(
                Problem(
                    (*path, "priorityClasses", j),
                    "unknown-priority-class",
                    f"priority class {name!r} is not defined",
                    f"define it under `priorityClasses:`; {suggest(name, sorted(classes))}",
                )
            )
    return out


def _unique(items: Sequence[str], section: str, what: str) -> list[Problem]:
    seen: set[str] = set()
    out = []
    for i, name in enumerate(items):
        if name in seen:
            out.append(
                Problem(
                    (section, i, "name"),
                    f"duplicate-{what}",
                    f"{what} {name!r} is defined twice",
                    "rename or remove one",
                )
            )
        seen.add(name)
    return out


def _unknown(
    path: tuple[str, ...], code: str, names: Iterable[str], known: Sequence[str], kind: str
) -> list[Problem]:
    """A problem per name of `names` (each under `path`) that is not one of `known`, the
    names of the `kind` there are."""
    listed = ", ".join(known) or "none yet"
    fix = f"name one of the {kind}s there are ({listed}), or remove it"
    return [Problem((*path, n), code, f"no {kind} {n!r}", fix) for n in names if n not in known]


def _plugin_checks(spec: PolicySpec) -> list[Problem]:
    """What the scheduling section names must be registered in the engine (its registries as
    they are now: a score or victim order added there may be named at once)."""
    s = spec.scheduling
    out = _unknown(
        ("scheduling", "scoring"), "unknown-score", s.scoring, score_names(), "score plugin"
    )
    orders = victim_order_names()
    if s.victimOrder not in orders:
        out.append(
            Problem(
                ("scheduling", "victimOrder"),
                "unknown-victim-order",
                f"no victim order {s.victimOrder!r}",
                f"name one of the engine's victim orders ({', '.join(orders)})",
            )
        )
    return out


def _cross_checks(
    spec: PolicySpec,
    flavors: Mapping[FlavorName, Flavor],
    capacity: Mapping[FlavorName, int],
    units: Mapping[QuotaKey, GpuUnit],
) -> list[Problem]:
    out: list[Problem] = []
    out += _unique([p.name for p in spec.pools], "pools", "pool")
    out += _unique([q.name for q in spec.queues], "queues", "queue")
    out += _unique([c.name for c in spec.cohorts], "cohorts", "cohort")
    out += _unique([c.name for c in spec.priorityClasses], "priorityClasses", "priority-class")
    cohorts = {c.name for c in spec.cohorts}
    classes = {c.name for c in spec.priorityClasses}
    queues = [q.name for q in spec.queues]
    out += _unknown(
        ("objective", "waitP95Seconds"), "unknown-queue", spec.objective.waitP95Seconds, queues,
        "queue",
    )  # fmt: skip
    namespace_owner: dict[str, str] = {}
    for i, q in enumerate(spec.queues):
        out += _check_queue(i, q, flavors, units, cohorts, classes)
        for j, ns in enumerate(q.namespaces):
            if ns in SYSTEM_NAMESPACES:
                out.append(
                    Problem(
                        ("queues", i, "namespaces", j),
                        "system-namespace",
                        f"namespace {ns!r} is Kubernetes' own: its pods (the control plane's "
                        "add-ons) must never wait on a GPU queue or carry its ResourceQuota",
                        "list the namespaces your teams run GPU work in",
                    )
                )
            if ns in namespace_owner and namespace_owner[ns] != q.name:
                out.append(
                    Problem(
                        ("queues", i, "namespaces", j),
                        "namespace-in-two-queues",
                        f"namespace {ns!r} belongs to queues {namespace_owner[ns]} and {q.name}",
                        "give each namespace one queue (pods name another with a queue label)",
                    )
                )
            namespace_owner.setdefault(ns, q.name)
    defaults = [c.name for c in spec.priorityClasses if c.default]
    if len(defaults) > 1:
        out.append(
            Problem(
                ("priorityClasses",),
                "two-defaults",
                f"{len(defaults)} priority classes are marked default: {', '.join(defaults)}",
                "mark at most one `default: true`",
            )
        )
    out += capacity_checks(spec, flavors, capacity, units)
    out += cohort_checks(spec, flavors, units)
    return out


def build_policy(data: Any, catalog: Catalog, source: str = "policy") -> LoadedPolicy:
    try:
        spec = PolicySpec.model_validate(data)
    except ValidationError as exc:
        raise InvalidInput(source, problems_from(exc, PolicySpec)) from None
    problems: list[Problem] = []
    pools: list[tuple[int, Pool]] = []
    for i, pspec in enumerate(spec.pools):
        pool, probs = build_pool(pspec, catalog, ("pools", i))
        problems.extend(probs)
        if pool is not None:
            pools.append((i, pool))
    flavors, capacity, probs = _flavors(pools)
    problems.extend(probs)
    problems.extend(_size_checks(pools))
    problems.extend(_plugin_checks(spec))
    health, probs = gpu_health(spec.gpuHealth)
    problems.extend(probs)
    units = gpu_units([p for _, p in pools])
    if len(pools) == len(spec.pools):
        # Quota checks need every pool's flavors; with a broken pool they would mislead.
        problems.extend(_cross_checks(spec, flavors, capacity, units))
    if errors(problems):
        raise InvalidInput(source, problems)
    policy = Policy(
        name=spec.metadata.name,
        description=spec.metadata.description,
        pools=tuple(p for _, p in pools),
        flavors=dict(sorted(flavors.items())),
        capacity=dict(sorted(capacity.items())),
        queues=tuple(_queue(q, units) for q in spec.queues),
        cohorts=tuple(build_cohort(c, units) for c in spec.cohorts),
        priority_classes=tuple(
            PriorityClass(c.name, c.value, c.preemptible, c.default, c.description)
            for c in spec.priorityClasses
        ),
        topology_keys=TopologyKeys(
            spec.topologyKeys.rack, spec.topologyKeys.nvlinkDomain, spec.topologyKeys.block
        ),
        scheduling=_scheduling(spec),
        monitoring=_monitoring(spec),
        objective=Objective(
            Minimize(spec.objective.minimize),
            dict(sorted(spec.objective.waitP95Seconds.items())),
            spec.objective.unnamedWaitGrowth,
        ),
        units=units,
        gpu_health=health,
    )
    if policy.nested:
        probs = tree_checks(policy)
        problems.extend(probs)
        if errors(probs):
            raise InvalidInput(source, problems)
    if spec.autoscaling:
        # one replica of each is checked as a workload of the policy built so far
        scaled, probs = build_autoscaling(spec, policy)
        problems.extend(probs)
        if errors(probs):
            raise InvalidInput(source, problems)
        policy = dataclasses.replace(policy, autoscaling=scaled)
    return LoadedPolicy(policy, tuple(problems))


def _monitoring(spec: PolicySpec) -> Monitoring:
    m = spec.monitoring
    return Monitoring(
        m.gpuUtilizationLowPercent,
        m.gpuUtilizationLowForSeconds,
        m.gpuMemoryHighPercent,
        m.gpuMemoryHighForSeconds,
        m.gpuTemperatureHighCelsius,
        m.gpuTemperatureHighForSeconds,
        m.queueStarvedSeconds,
        m.gangStuckSeconds,
    )


# The largest GPU clusters that exist hold some 200,000 GPUs; everything downstream (cluster
# model, simulator, scheduler view) is linear in slices, so both are bounded up front.
MAX_GPUS = 200_000
MAX_CLUSTER_SLICES = 2_000_000


def _size_checks(pools: list[tuple[int, Pool]]) -> list[Problem]:
    gpus = sum(p.gpus for _, p in pools)
    slices = sum(p.nodes * sum(n for _, n in p.flavor_slices_per_node()) for _, p in pools)
    if gpus > MAX_GPUS:
        return [
            Problem(
                ("pools",),
                "cluster-too-large",
                f"the pools hold {gpus:,} GPUs, more than the {MAX_GPUS:,} of the largest "
                "clusters that exist",
                "check `nodes` and `gpusPerNode`; model one part of a larger fleet per policy",
            )
        ]
    if slices > MAX_CLUSTER_SLICES:
        return [
            Problem(
                ("pools",),
                "cluster-too-large",
                f"the pools hold {slices:,} slices (GPUs × replicas or MIG instances), more "
                f"than {MAX_CLUSTER_SLICES:,}",
                "use fewer time-slicing replicas or nodes",
            )
        ]
    return []


def _scheduling(spec: PolicySpec) -> SchedulingConfig:
    s = spec.scheduling
    return SchedulingConfig(
        queueing=QueueingStrategy(s.queueing),
        max_head_wait_s=s.maxHeadWaitSeconds,
        min_runtime_s=s.minRuntimeSeconds,
        preemption=s.preemption,
        scoring=ScoringWeights.of({**dict(DEFAULT_SCORING), **s.scoring}),
        victim_order=s.victimOrder,
        candidates_per_pod=s.candidatesPerPod,
        gang=s.gang,
        bound_elsewhere=s.boundElsewhere,
        reserve_after_s=s.reserveAfterSeconds,
        default_runtime_s=s.defaultRuntimeSeconds,
        reclaim_large_ratio=s.reclaimLargeVictimRatio,
        reclaim_large_after_s=s.reclaimLargeVictimAfterSeconds,
        reclaim_grace_s=s.reclaimGraceSeconds,
        reclaim_past_budget_s=s.reclaimPastBudgetAfterSeconds,
        max_pods_per_cycle=s.maxPodsPerCycle,
        consolidate_max_moves=s.consolidateMaxMoves,
        loans_wait_for_lenders=s.loansWaitForLenders,
        usage_half_life_s=s.usageHalfLifeSeconds,
    )


def _queue(q: QueueSpec, units: Mapping[QuotaKey, GpuUnit]) -> Queue:
    return Queue(
        name=q.name,
        namespaces=tuple(q.namespaces),
        cohort=q.cohort,
        quotas=tuple(quota_of(QuotaKey(key), s, units) for key, s in sorted(q.quota.items())),
        weight_milli=round(q.weight * 1000),
        max_per_workload=tuple(sorted((FlavorName(f), n) for f, n in q.maxPerWorkload.items())),
        allowed_priority_classes=tuple(q.priorityClasses),
        reclaim_wait_s=q.reclaimWaitSeconds,
        idleness=_idleness(q.idleness),
    )


def _idleness(spec: IdlenessSpec | None) -> IdleRule | None:
    if spec is None:
        return None
    return IdleRule(
        activity_below=spec.activityBelow,
        warn_after_s=spec.warnAfterSeconds,
        reclaim_after_s=spec.reclaimAfterSeconds,
        within_quota=spec.withinQuota == "reclaim",
    )


def load_policy(path: str | FsPath, catalog_files: Sequence[str | FsPath] = ()) -> LoadedPolicy:
    """Read, validate and build a policy file; raises `InvalidInput` with line numbers."""
    catalog = load_catalog(catalog_files)
    return _built(read_yaml(path), catalog)


def load_policy_text(
    text: str, source: str, catalog_files: Sequence[str | FsPath] = ()
) -> LoadedPolicy:
    """`load_policy` for a policy held elsewhere than in a file (a ConfigMap's key)."""
    catalog = load_catalog(catalog_files)
    return _built(parse_yaml(text, source), catalog)


def _built(doc: YamlDocument, catalog: Catalog) -> LoadedPolicy:
    try:
        loaded = build_policy(doc.data, catalog, doc.source)
    except InvalidInput as exc:
        raise InvalidInput(exc.source, [_with_line(p, doc) for p in exc.problems]) from None
    warnings = tuple(_with_line(p, doc) for p in loaded.warnings)
    return LoadedPolicy(loaded.policy, warnings, doc)


def _with_line(problem: Problem, doc: YamlDocument) -> Problem:
    return replace(problem, line=doc.line_of(problem.path))
