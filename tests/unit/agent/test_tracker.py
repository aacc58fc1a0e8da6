"""The health agent's decisions through its NVML seam (readings and XIDs the tests make):
an XID takes a GPU out of service and it comes back only after clean checks; temperature has
hysteresis, so a GPU hovering at the limit does not flap; ECC and pending retirements count."""

from __future__ import annotations

import dataclasses

from gpucarve.agent.readings import GpuReading, Xid
from gpucarve.agent.tracker import HealthTracker
from gpucarve.core.policy import GpuHealth

OK = GpuReading(0, "GPU-0", 60, None, 0, 0, False, 300.0)


def at(index: int = 0, **change: object) -> GpuReading:
    return dataclasses.replace(OK, index=index, uuid=f"GPU-{index}", **change)  # type: ignore[arg-type]


def test_an_xid_takes_a_gpu_out_until_three_clean_checks() -> None:
    t = HealthTracker(GpuHealth(clean_checks=3))
    (v,) = t.observe([at(0), at(1)], [Xid(1, 79)])
    assert (v.index, v.reason, v.needs_reset) == (1, "XID 79", True)
    for _ in range(2):
        assert [x.index for x in t.observe([at(0), at(1)], [])] == [1]
    assert t.observe([at(0), at(1)], []) == []


def test_an_application_xid_changes_nothing() -> None:
    t = HealthTracker()
    assert t.observe([at(0)], [Xid(0, 13), Xid(0, 43)]) == []


def test_temperature_has_hysteresis_and_never_flaps() -> None:
    t = HealthTracker(GpuHealth(temperature_c=90, clean_checks=2), hysteresis_c=5)
    seen = []
    # hot, then hovering just under the limit (and touching it): stays out; 5 °C below the
    # limit for two checks in a row: back in service
    for temp in (91, 89, 88, 90, 86, 85, 84, 84):
        seen.append(bool(t.observe([at(0, temperature_c=temp)], [])))
    assert seen == [True, True, True, True, True, True, False, False]
    assert t.observe([at(0, temperature_c=89)], []) == []  # under the limit: in service


def test_the_gpus_own_slowdown_threshold_is_the_limit_when_lower() -> None:
    t = HealthTracker(GpuHealth(temperature_c=90))
    (v,) = t.observe([at(0, temperature_c=86, slowdown_c=85)], [])
    assert v.reason == "86 °C (limit 85 °C)"


def test_memory_errors() -> None:
    t = HealthTracker(GpuHealth(memory_errors=10))
    assert t.observe([at(0, ecc_dbe_volatile=2)], []) == []  # counted from the first look
    (v,) = t.observe([at(0, ecc_dbe_volatile=3)], [])
    assert v.reason == "1 new uncorrected ECC errors" and v.needs_reset
    t = HealthTracker(GpuHealth(memory_errors=10))
    (v,) = t.observe([at(0, ecc_dbe_aggregate=10)], [])
    assert "10 uncorrected ECC errors over its life" in v.reason
    (v,) = HealthTracker().observe([at(0, retired_pending=True)], [])
    assert v.needs_reset


def test_a_new_fault_restarts_the_count() -> None:
    t = HealthTracker(GpuHealth(clean_checks=2))
    t.observe([at(0)], [Xid(0, 48)])
    t.observe([at(0)], [])
    t.observe([at(0)], [Xid(0, 63)])
    assert t.observe([at(0)], []) and t.observe([at(0)], []) == []
