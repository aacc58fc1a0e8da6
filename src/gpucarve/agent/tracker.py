"""Which GPUs are faulty, decided check by check: each fault is classed (`core/gpu_faults.py`)
and the class says what brings the GPU back, so a GPU never flaps in and out.

A GPU is faulty at once on a critical XID of the policy's list (`gpuHealth.xids`), on new
uncorrected ECC errors or at least `memory_errors` over its life, on pages or rows waiting for
a reset, on new NVLink recovery errors, when NVML loses it, at `temperature_c` (or its own
slowdown threshold, if lower), or while hardware throttles its clocks. What ends the fault is
its class's action: `wait` (and `report`) — `clean_checks` clean checks in a row, the
temperature `hysteresis_c` below its limit; `reset` — the agent's reset of the GPU, then the
clean checks; `reboot` — a new boot of the node; `replace` — a person. A new fault starts the
count again and keeps the stronger action. A GPU that fails `flap_limit` times within
`flap_window_s` stays out until a person clears it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpucarve.agent.readings import GpuReading, Xid
from gpucarve.core.gpu_faults import Action, FaultClass, class_of_xid
from gpucarve.core.policy import GpuHealth

HYSTERESIS_C = 5
RESET_ATTEMPTS = 3  # failed resets in a row before a fault asks for a reboot instead
# which action outweighs which when a GPU has two faults at once
_RANK = {Action.REPORT: 0, Action.WAIT: 1, Action.RESET: 2, Action.REPLACE: 3, Action.REBOOT: 4}
FLAPPING = "flapping"


@dataclass(frozen=True, slots=True)
class Verdict:
    index: int
    reason: str
    fault_class: str = "other-xid"
    action: Action = Action.RESET
    since: int = 0  # Unix seconds: when this fault began
    reset: bool = False  # the agent reset the GPU for it; clean checks follow

    @property
    def needs_reset(self) -> bool:
        return self.action is Action.RESET and not self.reset


@dataclass
class _State:
    reason: str
    fault_class: str
    action: Action
    since: int
    reset: bool = False
    clean: int = 0
    failed_resets: int = 0

    def verdict(self, index: int) -> Verdict:
        return Verdict(index, self.reason, self.fault_class, self.action, self.since, self.reset)


@dataclass
class HealthTracker:
    limits: GpuHealth = field(default_factory=GpuHealth)
    hysteresis_c: int = HYSTERESIS_C
    _out: dict[int, _State] = field(default_factory=dict)
    _dbe_seen: dict[int, int] = field(default_factory=dict)
    _nvlink_seen: dict[int, int] = field(default_factory=dict)
    _present: set[int] = field(default_factory=set)
    _began: dict[int, list[int]] = field(default_factory=dict)  # fault start times, per GPU

    def _cls(self, name: str) -> FaultClass:
        return self.limits.fault_class(name)

    def _faults(self, r: GpuReading, xids: list[int], hot: int) -> list[tuple[str, FaultClass]]:
        out: list[tuple[str, FaultClass]] = []
        classes = self.limits.by_name()
        critical = [x for x in xids if x in self.limits.xids]
        for x in critical:
            out.append((f"XID {x}", class_of_xid(x, classes)))
        if r.lost:
            out.append(("NVML no longer sees the GPU", self._cls("device-lost")))
        before = self._dbe_seen.get(r.index, r.ecc_dbe_volatile)
        if r.ecc_dbe_volatile > before:
            new = r.ecc_dbe_volatile - before
            out.append((f"{new} new uncorrected ECC errors", self._cls("memory-uncorrected")))
        links = self._nvlink_seen.get(r.index, r.nvlink_errors)
        if r.nvlink_errors > links:
            out.append((f"{r.nvlink_errors - links} new NVLink errors", self._cls("nvlink")))
        if r.ecc_dbe_aggregate >= self.limits.memory_errors:
            why = (f"{r.ecc_dbe_aggregate} uncorrected ECC errors over its life "
                   f"(limit {self.limits.memory_errors})")  # fmt: skip
            out.append((why, self._cls("memory-worn")))
        if r.retired_pending:
            why = "memory pages or rows wait for a reset to be retired"
            out.append((why, self._cls("remap-pending")))
        if r.temperature_c >= hot:
            out.append((f"{r.temperature_c} °C (limit {hot} °C)", self._cls("thermal")))
        if r.throttled:
            out.append((f"clocks throttled: {r.throttled}", self._cls("throttled")))
        return out

    def _begin(self, index: int, now: int) -> bool:
        """Note a fault beginning; whether the GPU now flaps."""
        window = [t for t in self._began.get(index, []) if t > now - self.limits.flap_window_s]
        window.append(now)
        self._began[index] = window
        return len(window) >= self.limits.flap_limit

    def _fault(self, index: int, found: list[tuple[str, FaultClass]], now: int) -> None:
        reason, cls = max(found, key=lambda f: _RANK[f[1].action])
        state = self._out.get(index)
        if state is None:
            state = _State(reason, cls.name, cls.action, now)
            if cls.action is not Action.REPORT and self._begin(index, now):
                state.action = Action.REPLACE
                n = self.limits.flap_limit
                state.reason = (
                    f"{reason}; {FLAPPING}: {n} faults within {self.limits.flap_window_s} s"
                )
            self._out[index] = state
            return
        state.clean = 0
        if _RANK[cls.action] >= _RANK[state.action]:
            state.reason, state.fault_class, state.action = reason, cls.name, cls.action
            if cls.action is Action.RESET:
                state.reset = False  # a new fault that needs a reset needs a new one
                state.failed_resets = 0

    def _cleared(self, state: _State, r: GpuReading, hot: int) -> bool:
        if state.action in (Action.REPLACE, Action.REBOOT):
            return False
        if state.action is Action.RESET and not state.reset:
            return False
        cool = r.temperature_c <= hot - self.hysteresis_c
        state.clean = state.clean + 1 if cool else 0
        return state.clean >= self.limits.clean_checks

    def observe(self, readings: list[GpuReading], xids: list[Xid], now: int = 0) -> list[Verdict]:
        """One check at Unix second `now`: the faulty GPUs after it (index order)."""
        by_gpu: dict[int, list[int]] = {}
        for x in xids:
            by_gpu.setdefault(x.index, []).append(x.code)
        seen = {r.index for r in readings}
        for gone in sorted(self._present - seen):
            self._fault(gone, [("NVML no longer sees the GPU", self._cls("device-lost"))], now)
        self._present |= seen
        for r in readings:
            hot = self.limits.temperature_c
            if r.slowdown_c:
                hot = min(hot, r.slowdown_c)
            found = self._faults(r, by_gpu.get(r.index, []), hot)
            self._dbe_seen[r.index] = r.ecc_dbe_volatile
            self._nvlink_seen[r.index] = r.nvlink_errors
            if found:
                self._fault(r.index, found, now)
                continue
            state = self._out.get(r.index)
            if state is not None and self._cleared(state, r, hot):
                del self._out[r.index]
        return self.verdicts()

    def verdicts(self) -> list[Verdict]:
        return [s.verdict(i) for i, s in sorted(self._out.items())]

    def reset_failed(self, index: int, why: str) -> bool:
        """A reset of this GPU failed; after `RESET_ATTEMPTS` in a row the fault asks for a
        node reboot instead (NVIDIA's next step), so a GPU is never stuck waiting for a reset
        that cannot happen. Whether it did now."""
        state = self._out.get(index)
        if state is None or state.action is not Action.RESET:
            return False
        state.failed_resets += 1
        if state.failed_resets < RESET_ATTEMPTS:
            return False
        state.action = Action.REBOOT
        state.reason = f"{state.reason}; reset failed {RESET_ATTEMPTS} times ({why})"
        return True

    def was_reset(self, index: int) -> None:
        """The agent reset this GPU: its clean checks count from now."""
        state = self._out.get(index)
        if state is not None:
            state.reset, state.clean = True, 0

    def restore(self, verdicts: list[Verdict]) -> None:
        """Faults a previous agent process wrote onto the Node (an agent restart is no
        remedy): each stands until its class's own remedy. A reboot's faults are not given
        here once the node has booted again (the caller compares boot ids)."""
        for v in verdicts:
            self._out.setdefault(
                v.index, _State(v.reason, v.fault_class, v.action, v.since, v.reset)
            )
            self._began.setdefault(v.index, [v.since])
