"""The real `GpuSource`: NVML through NVIDIA's own bindings (`nvidia-ml-py`, module
`pynvml`), imported only here and only when the agent runs on a GPU node."""

from __future__ import annotations

import contextlib
import importlib
import shutil
import subprocess
from typing import Any

from gpucarve.agent.readings import DeviceSlot, GpuReading, ResetFailed, Xid

# NVML's clock event (throttle) reasons that hardware imposes, by bit
_HW_THROTTLE = ((0x8, "hardware slowdown"), (0x40, "hardware thermal slowdown"),
                (0x80, "power brake"))  # fmt: skip
RESET_TIMEOUT_S = 120


class NvmlSource:
    def __init__(self) -> None:
        # imported at run time: only a GPU node has libnvidia-ml (and the module has no types)
        self.nvml: Any = importlib.import_module("pynvml")
        n = self.nvml
        n.nvmlInit()
        self.handles = [n.nvmlDeviceGetHandleByIndex(i) for i in range(n.nvmlDeviceGetCount())]
        self.events = n.nvmlEventSetCreate()
        for h in self.handles:
            # a GPU that cannot report XIDs is still read for the rest
            with contextlib.suppress(n.NVMLError):
                n.nvmlDeviceRegisterEvents(h, n.nvmlEventTypeXidCriticalError, self.events)

    def _try(self, call: Any, *args: Any, default: Any = None) -> Any:
        try:
            return call(*args)
        except self.nvml.NVMLError:
            return default

    def _uncorrected(self, h: Any, counter: int) -> int:
        n = self.nvml
        kind = n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
        return int(self._try(n.nvmlDeviceGetTotalEccErrors, h, kind, counter) or 0)

    def _uuid(self, h: Any) -> str:
        uuid = self._try(self.nvml.nvmlDeviceGetUUID, h, default="")
        return uuid.decode() if isinstance(uuid, bytes) else str(uuid)

    def _lost(self, h: Any) -> bool:
        n = self.nvml
        try:
            n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU)
        except n.NVMLError as exc:
            return getattr(exc, "value", None) == getattr(n, "NVML_ERROR_GPU_IS_LOST", -1)
        return False

    def _throttled(self, h: Any) -> str:
        n = self.nvml
        call = getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            n, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )
        bits = int(self._try(call, h, default=0) or 0) if call is not None else 0
        return ", ".join(name for bit, name in _HW_THROTTLE if bits & bit)

    def _nvlink_errors(self, h: Any) -> int:
        n = self.nvml
        total = 0
        for link in range(int(getattr(n, "NVML_NVLINK_MAX_LINKS", 0))):
            if self._try(n.nvmlDeviceGetNvLinkState, h, link, default=0) != n.NVML_FEATURE_ENABLED:
                continue
            kind = n.NVML_NVLINK_ERROR_DL_RECOVERY
            total += int(self._try(n.nvmlDeviceGetNvLinkErrorCounter, h, link, kind, default=0))
        return total

    def read(self) -> list[GpuReading]:
        n = self.nvml
        out = []
        for i, h in enumerate(self.handles):
            remapped = self._try(n.nvmlDeviceGetRemappedRows, h, default=(0, 0, 0, 0))
            retired = self._try(n.nvmlDeviceGetRetiredPagesPendingStatus, h, default=0)
            temp = self._try(n.nvmlDeviceGetTemperature, h, n.NVML_TEMPERATURE_GPU, default=0)
            slowdown = self._try(
                n.nvmlDeviceGetTemperatureThreshold, h, n.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
            )
            out.append(
                GpuReading(
                    index=i,
                    uuid=self._uuid(h),
                    temperature_c=int(temp),
                    slowdown_c=None if slowdown is None else int(slowdown),
                    ecc_dbe_volatile=self._uncorrected(h, n.NVML_VOLATILE_ECC),
                    ecc_dbe_aggregate=self._uncorrected(h, n.NVML_AGGREGATE_ECC),
                    retired_pending=bool(remapped[2]) or retired == n.NVML_FEATURE_ENABLED,
                    power_w=int(self._try(n.nvmlDeviceGetPowerUsage, h, default=0)) / 1000,
                    nvlink_errors=self._nvlink_errors(h),
                    lost=self._lost(h),
                    throttled=self._throttled(h),
                )
            )
        return out

    def devices(self) -> dict[str, DeviceSlot]:
        """Every GPU's UUID, and each MIG instance's (the device plugin's device ids) with
        its profile from the device's name ("NVIDIA A100-SXM4-80GB MIG 3g.40gb") and its
        placement from its GPU instance where NVML lets this process read it."""
        n = self.nvml
        out: dict[str, DeviceSlot] = {}
        for i, h in enumerate(self.handles):
            out[self._uuid(h)] = DeviceSlot(i)
            mode = self._try(n.nvmlDeviceGetMigMode, h, default=(0, 0))
            if mode[0] != n.NVML_DEVICE_MIG_ENABLE:
                continue
            for k in range(int(self._try(n.nvmlDeviceGetMaxMigDeviceCount, h, default=0))):
                mig = self._try(n.nvmlDeviceGetMigDeviceHandleByIndex, h, k)
                if mig is None:
                    continue  # an empty slot
                name = self._try(n.nvmlDeviceGetName, mig, default="")
                name = name.decode() if isinstance(name, bytes) else str(name)
                profile = name.rpartition(" MIG ")[2] or None
                start = None
                gi_id = self._try(n.nvmlDeviceGetGpuInstanceId, mig)
                gi = None if gi_id is None else self._try(n.nvmlDeviceGetGpuInstanceById, h, gi_id)
                info = None if gi is None else self._try(n.nvmlGpuInstanceGetInfo, gi)
                if info is not None:
                    start = int(info.placement.start)
                out[self._uuid(mig)] = DeviceSlot(i, profile, start)
        return out

    def xids(self, timeout_ms: int) -> list[Xid]:
        n = self.nvml
        index = {self._uuid(h): i for i, h in enumerate(self.handles)}
        out: list[Xid] = []
        wait = timeout_ms
        while True:
            try:
                data = n.nvmlEventSetWait_v2(self.events, wait)
            except n.NVMLError:
                return out  # a timeout: nothing (more) happened
            out.append(Xid(index.get(self._uuid(data.device), -1), int(data.eventData)))
            wait = 0

    def busy(self, index: int) -> bool:
        """Any compute or graphics process on the GPU or on one of its MIG instances."""
        n = self.nvml
        if not 0 <= index < len(self.handles):
            return True  # a GPU NVML does not list is never reset
        h = self.handles[index]
        handles = [h]
        for k in range(int(self._try(n.nvmlDeviceGetMaxMigDeviceCount, h, default=0))):
            mig = self._try(n.nvmlDeviceGetMigDeviceHandleByIndex, h, k)
            if mig is not None:
                handles.append(mig)
        for d in handles:
            for call in (n.nvmlDeviceGetComputeRunningProcesses,
                         n.nvmlDeviceGetGraphicsRunningProcesses):  # fmt: skip
                if self._try(call, d, default=[]):
                    return True
        return False

    def reset(self, index: int) -> None:
        """A GPU reset through nvidia-smi, NVML's own tool (the Python bindings offer no
        reset): the driver refuses while a process holds the GPU."""
        smi = shutil.which("nvidia-smi")
        if smi is None:
            raise ResetFailed("nvidia-smi is not on the agent's PATH")
        try:
            done = subprocess.run(
                [smi, "--gpu-reset", "-i", str(index)],
                capture_output=True, text=True, timeout=RESET_TIMEOUT_S, check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            raise ResetFailed(f"nvidia-smi --gpu-reset took over {RESET_TIMEOUT_S} s") from None
        except OSError as exc:  # not executable here, say
            raise ResetFailed(f"nvidia-smi could not run: {exc.strerror or exc}") from None
        if done.returncode != 0:
            raise ResetFailed((done.stdout + done.stderr).strip() or f"exit {done.returncode}")
