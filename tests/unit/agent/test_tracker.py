"""The health agent's decisions through its NVML seam (readings and XIDs the tests make):
an XID takes a GPU out of service and it comes back only after clean checks; temperature has
hysteresis, so a GPU hovering at the limit does not flap; ECC and pending retirements count."""

from __future__ import annotations

import dataclasses

from gpucarve.agent.readings import GpuReading, Xid
from gpucarve.agent.tracker import HealthTracker, Verdict
from gpucarve.core.gpu_faults import Action
from gpucarve.core.policy import GpuHealth

OK = GpuReading(0, "GPU-0", 60, None, 0, 0, False, 300.0)


def at(index: int = 0, **change: object) -> GpuReading:
    return dataclasses.replace(OK, index=index, uuid=f"GPU-{index}", **change)  # type: ignore[arg-type]


def test_an_xid_that_needs_a_reset_stays_until_the_reset_and_then_three_clean_checks() -> None:
    t = HealthTracker(GpuHealth(clean_checks=3))
    (v,) = t.observe([at(0), at(1)], [Xid(1, 48)], now=100)
    assert (v.index, v.reason, v.fault_class, v.since) == (1, "XID 48", "memory-uncorrected", 100)
    assert v.action is Action.RESET and v.needs_reset
    for _ in range(5):  # clean checks count for nothing before the reset
        assert [x.index for x in t.observe([at(0), at(1)], [])] == [1]
    t.was_reset(1)
    for _ in range(2):
        (v,) = t.observe([at(0), at(1)], [])
        assert not v.needs_reset and v.reset
    assert t.observe([at(0), at(1)], []) == []


def test_each_class_has_its_own_remedy() -> None:
    t = HealthTracker(GpuHealth(clean_checks=1))
    t.observe([at(0), at(1), at(2)], [Xid(0, 79), Xid(1, 64), Xid(2, 63)])
    for _ in range(3):
        t.observe([at(0), at(1), at(2)], [])
    got = {v.index: (v.fault_class, v.action) for v in t.verdicts()}
    assert got == {
        0: ("fallen-off-bus", Action.REBOOT),  # a reboot of the node ends it
        1: ("remap-failed", Action.REPLACE),  # a person ends it
        2: ("remap-pending", Action.RESET),  # a reset, then a clean check
    }
    t.was_reset(2)
    t.observe([at(0), at(1), at(2)], [])
    assert [v.index for v in t.verdicts()] == [0, 1]


def test_a_lost_gpu_and_a_gpu_nvml_no_longer_lists_are_device_lost() -> None:
    t = HealthTracker()
    t.observe([at(0), at(1)], [])
    (v,) = t.observe([at(0)], [])
    assert (v.index, v.fault_class, v.action) == (1, "device-lost", Action.REBOOT)
    (v, w) = t.observe([at(0, lost=True)], [])
    assert w.index == 1  # still lost
    assert (v.index, v.fault_class) == (0, "device-lost")


def test_nvlink_errors_count_from_the_first_look_and_throttling_is_only_reported() -> None:
    t = HealthTracker(GpuHealth(clean_checks=1))
    assert t.observe([at(0, nvlink_errors=7)], []) == []
    (v,) = t.observe([at(0, nvlink_errors=9)], [])
    assert (v.fault_class, v.reason) == ("nvlink", "2 new NVLink errors")
    t = HealthTracker(GpuHealth(clean_checks=1))
    (v,) = t.observe([at(0, throttled="power brake")], [])
    assert (v.fault_class, v.action) == ("throttled", Action.REPORT)
    assert t.observe([at(0)], []) == []


def test_the_stronger_action_wins_when_faults_meet() -> None:
    t = HealthTracker(GpuHealth(clean_checks=1))
    (v,) = t.observe([at(0, temperature_c=95)], [Xid(0, 48)])
    assert v.action is Action.RESET  # heat alone would wait; the XID needs a reset
    (v,) = t.observe([at(0)], [Xid(0, 79)])
    assert v.action is Action.REBOOT
    (v,) = t.observe([at(0, temperature_c=95)], [])
    assert v.action is Action.REBOOT  # a weaker fault later does not soften it


def test_a_gpu_that_flaps_stays_out_until_a_person_clears_it() -> None:
    t = HealthTracker(GpuHealth(clean_checks=1, flap_limit=3, flap_window_s=3600))
    now = 0
    for _ in range(2):
        t.observe([at(0, temperature_c=95)], [], now)
        t.observe([at(0)], [], now + 60)
        assert t.observe([at(0)], [], now + 120) == []
        now += 600
    (v,) = t.observe([at(0, temperature_c=95)], [], now)
    assert v.action is Action.REPLACE and "flapping: 3 faults within 3600 s" in v.reason
    for k in range(5):
        assert t.observe([at(0)], [], now + 60 * k)
    # outside the window the old faults no longer count
    t = HealthTracker(GpuHealth(clean_checks=1, flap_limit=3, flap_window_s=3600))
    for now in (0, 2000, 4000):
        (v,) = t.observe([at(0, temperature_c=95)], [], now)
        assert v.action is Action.WAIT
        t.observe([at(0)], [], now + 60)
        t.observe([at(0)], [], now + 120)


def test_restored_faults_keep_their_remedy() -> None:
    t = HealthTracker(GpuHealth(clean_checks=1))
    t.restore([Verdict(3, "XID 64", "remap-failed", Action.REPLACE, 50)])
    t.restore([Verdict(4, "XID 48", "memory-uncorrected", Action.RESET, 50)])
    for _ in range(3):
        got = t.observe([at(3), at(4)], [])
    assert [v.index for v in got] == [3, 4]


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
    assert v.needs_reset and v.fault_class == "remap-pending"


def test_a_new_fault_restarts_the_count_and_asks_for_a_new_reset() -> None:
    t = HealthTracker(GpuHealth(clean_checks=2))
    t.observe([at(0)], [Xid(0, 48)])
    t.was_reset(0)
    t.observe([at(0)], [])
    (v,) = t.observe([at(0)], [Xid(0, 63)])
    assert v.needs_reset
    t.observe([at(0)], [])
    t.observe([at(0)], [])
    assert t.verdicts()  # no reset since the new fault
    t.was_reset(0)
    assert t.observe([at(0)], []) and t.observe([at(0)], []) == []


def test_a_reset_that_keeps_failing_asks_for_a_reboot_instead() -> None:
    t = HealthTracker(GpuHealth(clean_checks=1))
    t.observe([at(0)], [Xid(0, 48)])
    assert [t.reset_failed(0, "in use by another client") for _ in range(3)] == [
        False, False, True
    ]  # fmt: skip
    (v,) = t.verdicts()
    assert (
        v.action is Action.REBOOT and "reset failed 3 times (in use by another client)" in v.reason
    )
    # a GPU that waits for no reset is not escalated
    t = HealthTracker()
    t.observe([at(0, temperature_c=99)], [])
    assert not any(t.reset_failed(0, "x") for _ in range(5))
    assert t.verdicts()[0].action is Action.WAIT
