"""GPU models and their MIG profiles, and lookup by the names the ecosystem uses.

The catalog is plain data. Loading it from YAML is the job of `gpucarve.config.catalog_file`;
this module only holds the values and answers "which model is `NVIDIA-H100-80GB-HBM3`?".
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property

from gpucarve.core.amounts import ProfileName

MILLI_PER_GPU = 1000


@dataclass(frozen=True, slots=True)
class MigProfile:
    """One GPU-instance profile, e.g. `3g.40gb` on an A100-80GB.

    `starts` are the allowed first memory slices; an instance occupies
    `[start, start + memory_slices)` on the memory-slice axis.
    """

    name: ProfileName
    compute_slices: int
    memory_slices: int
    memory_mib: int
    max_instances: int
    starts: tuple[int, ...]
    profile_id: int | None = None
    sm_count: int | None = None
    placements_verified: bool = False
    memory_estimated: bool = False

    @property
    def media_extensions(self) -> bool:
        """True for `+me` profiles: they take the GPU's media engines, one per GPU."""
        return "+me" in self.name

    @property
    def resource_name(self) -> str:
        """The extended resource the device plugin's mixed strategy advertises."""
        return "nvidia.com/mig-" + self.name.replace("+", ".")


@dataclass(frozen=True, slots=True)
class MigGeometry:
    memory_slices: int
    compute_slices: int
    profiles: tuple[MigProfile, ...]
    sm_count: int | None = None

    def profile(self, name: str) -> MigProfile | None:
        for p in self.profiles:
            if p.name == name:
                return p
        return None

    @property
    def profile_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.profiles)


@dataclass(frozen=True, slots=True)
class GpuModel:
    id: str
    flavor_prefix: str
    architecture: str
    compute_capability: str
    memory_gb: int
    memory_mib: int
    sm_count: int
    aliases: tuple[str, ...] = ()
    gfd_products: tuple[str, ...] = ()
    pci_device_ids: tuple[str, ...] = ()
    nvlink: bool = False
    price_per_gpu_hour: float | None = None
    price_note: str = ""
    mig: MigGeometry | None = None
    memory_estimated: bool = False
    source: str = ""

    @property
    def mig_capable(self) -> bool:
        return self.mig is not None

    @property
    def compute_major(self) -> int:
        return int(self.compute_capability.split(".")[0])

    @property
    def max_mps_replicas(self) -> int:
        # The NVIDIA device plugin caps MPS clients at 48 from compute capability 7.5 on and at
        # 16 below it (its helper is named isAtLeastVolta but compares against 7.5).
        major, minor = (int(x) for x in self.compute_capability.split("."))
        return 48 if (major, minor) >= (7, 5) else 16

    def mig_profile_sm_count(self, profile: MigProfile) -> int:
        """SMs of a MIG instance; estimated from the GPU's MIG SM count when not observed."""
        if profile.sm_count is not None:
            return profile.sm_count
        assert self.mig is not None
        full = self.mig.sm_count or self.sm_count
        return full * profile.compute_slices // self.mig.compute_slices


_NORMALIZE_RUNS = re.compile(r"[\s_]+")


def normalize_name(name: str) -> str:
    """Fold the spellings of one GPU name together.

    GFD product labels are the NVML device name with spaces turned into dashes, optionally
    suffixed `-SHARED` (time-sliced, not renamed) or `-MIG-<profile>` (single MIG strategy);
    older drivers drop the `NVIDIA ` prefix. All of those name the same model.
    """
    n = _NORMALIZE_RUNS.sub("-", name.strip()).upper()
    n = re.sub(r"-+", "-", n)
    n = re.sub(r"-MIG-.*$", "", n)
    n = re.sub(r"-SHARED$", "", n)
    return re.sub(r"^(NVIDIA-|TESLA-)", "", n)


class UnknownModel(LookupError):
    def __init__(self, name: str, suggestions: tuple[str, ...]) -> None:
        self.name = name
        self.suggestions = suggestions
        super().__init__(f"unknown GPU model {name!r}")


class AmbiguousModel(LookupError):
    def __init__(self, name: str, candidates: tuple[str, ...]) -> None:
        self.name = name
        self.candidates = candidates
        super().__init__(f"GPU model name {name!r} is ambiguous: {', '.join(candidates)}")


@dataclass(frozen=True)
class Catalog:
    models: tuple[GpuModel, ...]
    _index: Mapping[str, tuple[str, ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        index: dict[str, list[str]] = {}
        for m in self.models:
            for name in (m.id, *m.aliases, *m.gfd_products):
                ids = index.setdefault(normalize_name(name), [])
                if m.id not in ids:
                    ids.append(m.id)
        # A model's own id always wins over another model's alias of the same spelling.
        for m in self.models:
            index[normalize_name(m.id)] = [m.id]
        object.__setattr__(self, "_index", {k: tuple(v) for k, v in index.items()})

    @cached_property
    def _by_id(self) -> dict[str, GpuModel]:
        return {m.id: m for m in self.models}

    def get(self, model_id: str) -> GpuModel:
        return self._by_id[model_id]

    def lookup(self, name: str) -> GpuModel:
        """Find a model by id, alias or GFD product label (any case, spaces or dashes)."""
        ids = self._index.get(normalize_name(name))
        if ids is None:
            raise UnknownModel(name, self.suggest(name))
        if len(ids) > 1:
            raise AmbiguousModel(name, ids)
        return self._by_id[ids[0]]

    def suggest(self, name: str, n: int = 3) -> tuple[str, ...]:
        key = normalize_name(name)
        scored = sorted(
            ((difflib.SequenceMatcher(None, key, k).ratio(), k) for k in self._index),
            key=lambda t: (-t[0], t[1]),
        )
        # Only names about as close as the best one: a typo of one model should not
        # drag in every other model that shares its suffix.
        best = scored[0][0] if scored else 0.0
        close = [k for r, k in scored if r >= max(0.5, best - 0.05)]
        ids: list[str] = []
        for c in close:
            for mid in self._index[c]:
                if mid not in ids:
                    ids.append(mid)
        return tuple(ids[:n])

    def ids(self) -> tuple[str, ...]:
        return tuple(m.id for m in self.models)

    def merged(self, overrides: Iterable[GpuModel]) -> Catalog:
        """A catalog where `overrides` replace models of the same id and add new ones."""
        by_id = dict(self._by_id)
        for m in overrides:
            by_id[m.id] = m
        return Catalog(tuple(by_id.values()))
