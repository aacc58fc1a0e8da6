"""Load GPU catalogs: the packaged one, and users' files that add or override models.

A user's entry with `extends: <id>` starts from that model and changes only the keys it
names, so a platform team can set its negotiated price without restating MIG geometry.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from dataclasses import replace
from functools import lru_cache
from importlib import resources
from pathlib import Path as FsPath
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpucarve.config.pydantic_errors import problems_from
from gpucarve.config.yaml_source import YamlDocument, parse_yaml, read_yaml
from gpucarve.core.amounts import ProfileName
from gpucarve.core.catalog import Catalog, GpuModel, MigGeometry, MigProfile
from gpucarve.core.problems import InvalidInput, Problem
from gpucarve.core.vocabulary import API_VERSION

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


# Every MIG GPU so far (A30, A100, H100, H200, GH200, B200) has at most 8 memory and 8 compute
# slices; the layout search is exponential in them, so a catalog may not go beyond.
MAX_MIG_SLICES = 8


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


class ProfileSpec(_Strict):
    name: str = Field(pattern=r"^(\d+c\.)?\d+g\.\d+gb(\+me)?$")
    profileId: int | None = None
    computeSlices: int = Field(ge=1, le=MAX_MIG_SLICES)
    memorySlices: int = Field(ge=1, le=MAX_MIG_SLICES)
    memoryMiB: int = Field(ge=1, le=2**30)
    memoryEstimated: bool = False
    smCount: int | None = Field(default=None, ge=1, le=100_000)
    maxInstances: int = Field(ge=1, le=MAX_MIG_SLICES)
    starts: list[int] = Field(min_length=1, max_length=MAX_MIG_SLICES)
    placementsVerified: bool = False


class MigSpec(_Strict):
    memorySlices: int = Field(ge=1, le=MAX_MIG_SLICES)
    computeSlices: int = Field(ge=1, le=MAX_MIG_SLICES)
    smCount: int | None = Field(default=None, ge=1, le=100_000)
    profiles: list[ProfileSpec] = Field(min_length=1, max_length=16)


class ModelSpec(_Strict):
    id: str = Field(min_length=1, max_length=63)
    extends: str | None = None
    flavorPrefix: str = Field(min_length=1, max_length=40)
    aliases: list[str] = []
    gfdProducts: list[str] = []
    pciDeviceIds: list[str] = []
    architecture: str
    computeCapability: str = Field(pattern=r"^\d+\.\d+$")
    memoryGB: int = Field(ge=1, le=2**20)
    memoryMiB: int = Field(ge=1, le=2**30)
    memoryEstimated: bool = False
    smCount: int = Field(ge=1, le=100_000)
    nvlink: bool = False
    pricePerGpuHour: float | None = Field(default=None, ge=0, le=10_000)
    priceNote: str = ""
    mig: MigSpec | None = None
    source: str = ""


class CatalogFile(_Strict):
    apiVersion: Literal["gpucarve.io/v1alpha1"]
    kind: Literal["GpuCatalog"]
    models: list[dict[str, Any]] = Field(max_length=1000)


def _check_geometry(spec: MigSpec, path: tuple[str | int, ...]) -> list[Problem]:
    problems: list[Problem] = []
    seen: set[str] = set()
    for i, p in enumerate(spec.profiles):
        where = (*path, "profiles", i)
        if p.name in seen:
            problems.append(
                Problem(where, "duplicate-profile", f"profile {p.name} listed twice", "keep one")
            )
        seen.add(p.name)
        bad = [s for s in p.starts if s < 0 or s + p.memorySlices > spec.memorySlices]
        if bad:
            problems.append(
                Problem(
                    (*where, "starts"),
                    "bad-start",
                    f"start(s) {bad} put {p.name} ({p.memorySlices} memory slices) outside the "
                    f"GPU's {spec.memorySlices} memory slices",
                    "use starts s with 0 ≤ s and s + memorySlices ≤ the GPU's memorySlices",
                )
            )
        if p.computeSlices > spec.computeSlices:
            problems.append(
                Problem(
                    (*where, "computeSlices"),
                    "bad-compute",
                    f"{p.computeSlices} compute slices exceed the GPU's {spec.computeSlices}",
                    "fix computeSlices",
                )
            )
    return problems


def _to_model(spec: ModelSpec) -> GpuModel:
    mig = None
    if spec.mig is not None:
        mig = MigGeometry(
            memory_slices=spec.mig.memorySlices,
            compute_slices=spec.mig.computeSlices,
            sm_count=spec.mig.smCount,
            profiles=tuple(
                MigProfile(
                    name=ProfileName(p.name),
                    compute_slices=p.computeSlices,
                    memory_slices=p.memorySlices,
                    memory_mib=p.memoryMiB,
                    max_instances=p.maxInstances,
                    starts=tuple(sorted(set(p.starts))),
                    profile_id=p.profileId,
                    sm_count=p.smCount,
                    placements_verified=p.placementsVerified,
                    memory_estimated=p.memoryEstimated,
                )
                for p in spec.mig.profiles
            ),
        )
    return GpuModel(
        id=spec.id,
        flavor_prefix=spec.flavorPrefix,
        architecture=spec.architecture,
        compute_capability=spec.computeCapability,
        memory_gb=spec.memoryGB,
        memory_mib=spec.memoryMiB,
        sm_count=spec.smCount,
        aliases=tuple(spec.aliases),
        gfd_products=tuple(spec.gfdProducts),
        pci_device_ids=tuple(spec.pciDeviceIds),
        nvlink=spec.nvlink,
        price_per_gpu_hour=spec.pricePerGpuHour,
        price_note=spec.priceNote,
        mig=mig,
        memory_estimated=spec.memoryEstimated,
        source=spec.source,
    )


def _parse(
    doc: YamlDocument, base: dict[str, dict[str, Any]]
) -> list[tuple[dict[str, Any], GpuModel]]:
    try:
        top = CatalogFile.model_validate(doc.data)
    except ValidationError as exc:
        raise InvalidInput(doc.source, problems_from(exc, CatalogFile)) from None
    problems: list[Problem] = []
    out: list[tuple[dict[str, Any], GpuModel]] = []
    ids: set[str] = set()
    for i, raw in enumerate(top.models):
        path: tuple[str | int, ...] = ("models", i)
        entry = dict(raw)
        parent = entry.get("extends")
        if parent is not None:
            if not isinstance(parent, str) or parent not in base:
                problems.append(
                    Problem(
                        (*path, "extends"),
                        "unknown-model",
                        f"extends {parent!r}, which is not a model of the packaged catalog",
                        f"use one of: {', '.join(sorted(base))}",
                    )
                )
                continue
            merged = copy.deepcopy(base[parent])
            merged.update({k: v for k, v in entry.items() if k != "extends"})
            entry = merged
        try:
            spec = ModelSpec.model_validate(entry)
        except ValidationError as exc:
            problems.extend(problems_from(exc, ModelSpec, path))
            continue
        if spec.id in ids:
            problems.append(
                Problem(
                    (*path, "id"), "duplicate-model", f"model {spec.id} defined twice", "keep one"
                )
            )
        ids.add(spec.id)
        if not _DNS_LABEL.match(spec.flavorPrefix):
            problems.append(
                Problem(
                    (*path, "flavorPrefix"),
                    "bad-format",
                    f"flavorPrefix {spec.flavorPrefix!r} is not a lowercase DNS-style name",
                    "use lowercase letters, digits, '-' and '.'",
                )
            )
        if spec.mig is not None:
            problems.extend(_check_geometry(spec.mig, (*path, "mig")))
        out.append((entry, _to_model(spec)))
    if problems:
        raise InvalidInput(doc.source, problems)
    return out


@lru_cache(maxsize=1)
def _packaged() -> tuple[dict[str, dict[str, Any]], Catalog]:
    text = resources.files("gpucarve").joinpath("data/gpu-catalog.yaml").read_text("utf-8")
    doc = parse_yaml(text, "gpucarve/data/gpu-catalog.yaml")
    parsed = _parse(doc, {})
    raw = {model.id: entry for entry, model in parsed}
    return raw, Catalog(tuple(model for _, model in parsed))


def packaged_catalog() -> Catalog:
    return _packaged()[1]


def load_catalog(extra_files: Sequence[str | FsPath] = ()) -> Catalog:
    """The packaged catalog, with each user file's models added or overriding, in order."""
    raw, catalog = _packaged()
    raw = dict(raw)
    for f in extra_files:
        doc = read_yaml(f)
        try:
            parsed = _parse(doc, raw)
        except InvalidInput as exc:
            lines = [replace(p, line=doc.line_of(p.path)) for p in exc.problems]
            raise InvalidInput(exc.source, lines) from None
        catalog = catalog.merged(model for _, model in parsed)
        raw.update({model.id: entry for entry, model in parsed})
    return catalog


def catalog_with(models: Sequence[dict[str, Any]], source: str) -> Catalog:
    """The packaged catalog with `models` (catalog file entries) added or overriding."""
    raw, catalog = _packaged()
    doc = YamlDocument(source, {"apiVersion": API_VERSION, "kind": "GpuCatalog", "models": models})
    return catalog.merged(model for _, model in _parse(doc, dict(raw)))
