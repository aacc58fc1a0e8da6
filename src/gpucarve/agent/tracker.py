"""Which GPUs are out of service, decided check by check with hysteresis, so a GPU never
flaps in and out.

A GPU goes out of service at once on a critical XID (by default those NVIDIA's XID catalogue
lists as needing attention: 48 double-bit ECC, 63/64 row remapping, 74 NVLink, 79 fallen off
the bus, 94/95 contained/uncontained ECC), on new uncorrected ECC errors or at least
`memory_errors` over its life, on pages or rows waiting for a reset, or at `temperature_c` (or
its own slowdown threshold, if lower) — the policy's `gpuHealth`. It comes back only after
`clean_checks` checks in a row with nothing wrong and the temperature `hysteresis_c` below the
threshold; a new fault starts
the count again. XIDs that only a reset clears (48, 74, 79, 95) also say `needs_reset`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpucarve.agent.readings import GpuReading, Xid
from gpucarve.core.policy import GpuHealth

RESET_XIDS = (48, 74, 79, 95)
HYSTERESIS_C = 5


@dataclass(frozen=True, slots=True)
class Verdict:
    index: int
    reason: str
    needs_reset: bool = False


@dataclass
class _State:
    reason: str
    needs_reset: bool
    clean: int = 0


@dataclass
class HealthTracker:
    limits: GpuHealth = field(default_factory=GpuHealth)
    hysteresis_c: int = HYSTERESIS_C
    _out: dict[int, _State] = field(default_factory=dict)
    _dbe_seen: dict[int, int] = field(default_factory=dict)

    def _fault(self, r: GpuReading, xids: list[int], hot: int) -> tuple[str, bool] | None:
        critical = [x for x in xids if x in self.limits.xids]
        if critical:
            codes = ", ".join(str(x) for x in critical)
            return f"XID {codes}", any(x in RESET_XIDS for x in critical)
        before = self._dbe_seen.get(r.index, r.ecc_dbe_volatile)
        if r.ecc_dbe_volatile > before:
            return f"{r.ecc_dbe_volatile - before} new uncorrected ECC errors", True
        if r.ecc_dbe_aggregate >= self.limits.memory_errors:
            return (
                f"{r.ecc_dbe_aggregate} uncorrected ECC errors over its life "
                f"(limit {self.limits.memory_errors})",
                False,
            )
        if r.retired_pending:
            return "memory pages or rows wait for a reset to be retired", True
        if r.temperature_c >= hot:
            return f"{r.temperature_c} °C (limit {hot} °C)", False
        return None

    def observe(self, readings: list[GpuReading], xids: list[Xid]) -> list[Verdict]:
        """One check: the GPUs out of service after it (index order)."""
        by_gpu: dict[int, list[int]] = {}
        for x in xids:
            by_gpu.setdefault(x.index, []).append(x.code)
        for r in readings:
            hot = self.limits.temperature_c
            if r.slowdown_c:
                hot = min(hot, r.slowdown_c)
            fault = self._fault(r, by_gpu.get(r.index, []), hot)
            self._dbe_seen[r.index] = r.ecc_dbe_volatile
            state = self._out.get(r.index)
            if fault is not None:
                reason, reset = fault
                keep_reset = state is not None and state.needs_reset
                self._out[r.index] = _State(reason, reset or keep_reset)
                continue
            if state is None:
                continue
            cool = r.temperature_c <= hot - self.hysteresis_c
            state.clean = state.clean + 1 if cool else 0
            if state.clean >= self.limits.clean_checks:
                del self._out[r.index]
        return [Verdict(i, s.reason, s.needs_reset) for i, s in sorted(self._out.items())]
