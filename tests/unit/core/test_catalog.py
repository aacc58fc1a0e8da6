from __future__ import annotations

import pytest

from gpucarve.core.catalog import AmbiguousModel, Catalog, UnknownModel, normalize_name

REQUIRED = [
    "A100-SXM4-40GB",
    "A100-80GB",
    "A30-24GB",
    "H100-SXM5-80GB",
    "H100-PCIe-80GB",
    "H100-NVL-94GB",
    "H200-141GB",
    "GH200-96GB",
    "B200-180GB",
    "L40S",
    "L4",
    "T4",
    "V100-16GB",
    "V100-32GB",
    "A10",
    "RTX-4090",
]


@pytest.mark.parametrize("model", REQUIRED)
def test_catalog_has_every_required_model(catalog: Catalog, model: str) -> None:
    m = catalog.get(model)
    assert m.memory_mib > 0 and m.sm_count > 0 and m.architecture


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("NVIDIA-A100-SXM4-80GB", "A100-80GB"),
        ("NVIDIA-H100-80GB-HBM3", "H100-SXM5-80GB"),
        ("NVIDIA H100 80GB HBM3", "H100-SXM5-80GB"),
        ("Tesla-T4-SHARED", "T4"),
        ("Tesla-T4", "T4"),
        ("A100-SXM4-40GB-MIG-1g.5gb", "A100-SXM4-40GB"),
        ("NVIDIA-A100-SXM4-80GB-MIG-3g.40gb", "A100-80GB"),
        ("A100-80GB", "A100-80GB"),
        ("a100-80gb", "A100-80GB"),
        ("NVIDIA-L40S-SHARED", "L40S"),
        ("NVIDIA-GeForce-RTX-4090", "RTX-4090"),
        ("Tesla-V100-SXM2-16GB", "V100-16GB"),
        ("NVIDIA-H200", "H200-141GB"),
    ],
)
def test_lookup_by_ecosystem_names(catalog: Catalog, name: str, model: str) -> None:
    assert catalog.lookup(name).id == model


@pytest.mark.parametrize("name", ["A100", "H100", "V100", "H100-80GB", "GH200"])
def test_ambiguous_short_names_are_refused(catalog: Catalog, name: str) -> None:
    with pytest.raises(AmbiguousModel) as exc:
        catalog.lookup(name)
    assert len(exc.value.candidates) >= 2


def test_unknown_name_gets_close_suggestions(catalog: Catalog) -> None:
    with pytest.raises(UnknownModel) as exc:
        catalog.lookup("H100-SXM5-80G")
    assert exc.value.suggestions == ("H100-SXM5-80GB",)


def test_normalize_name_strips_suffixes() -> None:
    assert normalize_name("NVIDIA  A100_SXM4-80GB-SHARED") == "A100-SXM4-80GB"
    assert normalize_name("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb") == "A100-SXM4-40GB"


def test_mig_profiles_have_consistent_geometry(catalog: Catalog) -> None:
    for m in catalog.models:
        if m.mig is None:
            continue
        for p in m.mig.profiles:
            assert all(s >= 0 and s + p.memory_slices <= m.mig.memory_slices for s in p.starts), (
                m.id,
                p.name,
            )
            assert p.compute_slices <= m.mig.compute_slices
            # Sizes come from different drivers (the A100-80GB's 7g.80gb is 79.25 GiB in -lgip
            # while deviceQuery reported 81038 MiB), so allow half a percent.
            assert p.memory_mib <= m.memory_mib * 1.005, (m.id, p.name)
            assert p.resource_name.startswith("nvidia.com/mig-")
            assert "+" not in p.resource_name


def test_mps_replica_cap_follows_compute_capability(catalog: Catalog) -> None:
    assert catalog.get("V100-32GB").max_mps_replicas == 16
    assert catalog.get("T4").max_mps_replicas == 48
    assert catalog.get("H100-SXM5-80GB").max_mps_replicas == 48


def test_user_model_overrides_and_adds(catalog: Catalog) -> None:
    from dataclasses import replace

    cheaper = replace(catalog.get("T4"), price_per_gpu_hour=0.1)
    new = replace(catalog.get("L4"), id="L4-custom", aliases=(), gfd_products=("Custom-L4",))
    merged = catalog.merged([cheaper, new])
    assert merged.get("T4").price_per_gpu_hour == 0.1
    assert merged.lookup("Custom-L4").id == "L4-custom"
    assert len(merged.models) == len(catalog.models) + 1
