"""The one unit across sharing modes, and Kubernetes quantities."""

from __future__ import annotations

import pytest

from gpucarve.config.policy_build import load_policy
from gpucarve.core.quantity import QuantityError, cpu_milli, memory_mib, whole_count
from gpucarve.core.requests import candidate_flavors, charge_milli, gpu_memory_of, slices_per_pod
from gpucarve.core.workload import GpuKind, GpuRequest
from tests.paths import BUILTIN

POLICY = load_policy(BUILTIN / "three-teams.yaml").policy


def charge(flavor: str) -> int:
    f = POLICY.flavors[flavor]
    return charge_milli(f, gpu_memory_of(POLICY, f))


def test_charge_is_the_dominant_share_of_the_gpu() -> None:
    assert charge("h100-full") == 1000
    assert charge("a100-mig-3g.40gb") == 496  # memory 40192/81038 beats compute 3/7
    assert charge("a100-mig-1g.10gb") == 142  # compute 1/7 beats memory 9728/81038
    assert charge("l40s-shared") == 125


@pytest.mark.parametrize(
    ("milli", "memory", "replicas"),
    [(300, 0, 3), (0, 20480, 4), (125, 0, 1), (1000, 0, 8), (100, 5000, 1), (130, 0, 2)],
)
def test_fraction_takes_replicas_by_dominant_share(milli: int, memory: int, replicas: int) -> None:
    f = POLICY.flavors["l40s-shared"]
    req = GpuRequest(GpuKind.FRACTION, 1, milli=milli, memory_mib=memory)
    assert slices_per_pod(req, f, gpu_memory_of(POLICY, f)) == replicas


def test_candidate_flavors_by_kind() -> None:
    names = lambda r: [f.name for f in candidate_flavors(POLICY, r)]  # noqa: E731
    assert names(GpuRequest(GpuKind.WHOLE, 2)) == ["h100-full"]
    assert names(GpuRequest(GpuKind.MIG, 1, profile="2g.20gb")) == ["a100-mig-2g.20gb"]
    assert names(GpuRequest(GpuKind.SHARED, 1)) == ["l40s-shared"]
    assert names(GpuRequest(GpuKind.SHARED, 9)) == []  # more replicas than a GPU has
    assert names(GpuRequest(GpuKind.FRACTION, 1, memory_mib=60000)) == []  # L40S has 45373 MiB
    assert names(GpuRequest()) == []


@pytest.mark.parametrize(
    ("value", "cpu"), [("500m", 500), ("2", 2000), (3, 3000), ("0.25", 250), ("1.0001", 1001)]
)
def test_cpu(value: str | int, cpu: int) -> None:
    assert cpu_milli(value) == cpu


@pytest.mark.parametrize(
    ("value", "mib"), [("16Gi", 16384), ("1G", 954), ("512Mi", 512), ("1Ti", 1048576), (2**20, 1)]
)
def test_memory(value: str | int, mib: int) -> None:
    assert memory_mib(value) == mib


@pytest.mark.parametrize("bad", ["1.5", "lots", "-1", "1500m", True])
def test_whole_counts_refuse_fractions_and_junk(bad: str | bool) -> None:
    with pytest.raises(QuantityError):
        whole_count(bad)  # type: ignore[arg-type]


def test_whole_count_accepts_integral_forms() -> None:
    assert whole_count("3000m") == 3
    assert whole_count("2") == 2
