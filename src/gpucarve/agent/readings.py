"""What the agent reads of one GPU per check, and the seam it reads through."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


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


@dataclass(frozen=True, slots=True)
class Xid:
    index: int  # GPU index
    code: int


class GpuSource(Protocol):
    def read(self) -> list[GpuReading]: ...

    def xids(self, timeout_ms: int) -> list[Xid]:
        """Critical XID events since the last call, waiting at most `timeout_ms`."""
        ...
