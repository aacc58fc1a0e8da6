"""A workload's candidate flavors, ranked by where the fragmentation model would place each."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gpucarve.core.policy import Flavor
from gpucarve.core.workload import GpuKind, PodSet, Workload
from gpucarve.engine.placement.frag_place import TIE, Choice
from gpucarve.engine.placement.plugins import PodNeeds


def first_flavor_needs(
    w: Workload,
    flavors: Sequence[Sequence[Flavor]],
    needs_of: Callable[[PodSet, Flavor | None], PodNeeds],
) -> list[PodNeeds | None]:
    """Per pod set, its needs on its first candidate flavor (what the demand weighs)."""
    out: list[PodNeeds | None] = []
    for ps, f in zip(w.pod_sets, flavors, strict=True):
        if f:
            out.append(needs_of(ps, f[0]))
        else:
            out.append(needs_of(ps, None) if ps.gpu.kind is GpuKind.NONE else None)
    return out


def rank_combos(
    combos: Sequence[tuple[Flavor | None, ...]], choices: Sequence[Choice | None]
) -> list[tuple[Flavor | None, ...]]:
    """A workload's flavor choices, best first by where the model would place each (the
    highest score, then the lowest node), those it cannot place after them in their order."""
    scores = [c.score for c in choices if c is not None]
    if not scores:
        return list(combos)
    top = max(scores)
    tie = top - TIE * max(1.0, abs(top))

    def key(k: int) -> tuple[int, float, int, int]:
        c = choices[k]
        if c is None:
            return (2, 0.0, 0, k)
        if c.score >= tie:
            return (0, 0.0, c.node, k)  # ties go to the lowest node, as within a flavor
        return (1, -c.score, c.node, k)

    return [combos[k] for k in sorted(range(len(combos)), key=key)]
