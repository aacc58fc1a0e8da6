"""What the agent reads of one GPU per check, and the seam it reads through."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

# the kubelet's PodResources API, node-local
POD_RESOURCES_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"


@dataclass(frozen=True, slots=True)
class GpuReading:
    index: int
    uuid: str
    temperature_c: int
    slowdown_c: int | None  # the GPU's own slowdown threshold, when NVML gives it
    ecc_dbe_volatile: int  # uncorrected (double-bit) errors since the driver loaded
    ecc_dbe_aggregate: int  # over the GPU's life
    retired_pending: bool  # pages or rows waiting for a reset to be retired or remapped
    power_w: float
    nvlink_errors: int = 0  # NVLink recovery errors over all links since the driver loaded
    lost: bool = False  # NVML answers that the GPU is lost (fallen off the bus)
    throttled: str = ""  # what holds its clocks down, when hardware does: "power brake", ...


@dataclass(frozen=True, slots=True)
class Xid:
    index: int  # GPU index
    code: int


class GpuSource(Protocol):
    def read(self) -> list[GpuReading]: ...

    def xids(self, timeout_ms: int) -> list[Xid]:
        """Critical XID events since the last call, waiting at most `timeout_ms`."""
        ...

    def busy(self, index: int) -> bool:
        """Whether a process holds the GPU (or one of its MIG instances)."""
        ...

    def reset(self, index: int) -> None:
        """Reset the GPU; raises ResetFailed with the reason when it could not be."""
        ...


class ResetFailed(Exception):
    """A GPU reset that did not happen, and why."""


@dataclass(frozen=True, slots=True)
class DeviceSlot:
    """Where a device the device plugin names (a GPU's or a MIG instance's UUID) is on the
    node: its GPU and, for a MIG instance, its profile and placement start (None where NVML
    does not say) — the parts of gpucarve's slice id."""

    gpu: int
    profile: str | None = None
    start: int | None = None

    def unit(self) -> str:
        if self.profile is None:
            return f"gpu{self.gpu}"
        at = "" if self.start is None else f"@{self.start}"
        return f"gpu{self.gpu}/{self.profile}{at}"


class DeviceMap(Protocol):
    def devices(self) -> dict[str, DeviceSlot]:
        """Device UUID -> where it is, for every GPU and MIG instance of the node."""
        ...
