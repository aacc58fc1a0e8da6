"""The agent's NVML reads through NVIDIA's bindings (`pynvml`, installed), with the library's
calls answered by the test: a lost GPU, hardware throttling, NVLink recovery errors counted
over the enabled links, processes on a GPU or its MIG instances, and a reset through
`nvidia-smi` (a script the test puts on PATH) that succeeds or says why not."""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

import pytest

from gpucarve.agent.nvml_source import NvmlSource
from gpucarve.agent.readings import ResetFailed

N: Any = importlib.import_module("pynvml")  # NVIDIA's bindings have no types


class Gpu:
    def __init__(self, **k: Any) -> None:
        self.lost = k.get("lost", False)
        self.reasons = k.get("reasons", 0)
        self.links = k.get("links", {})  # link -> recovery errors (enabled links only)
        self.procs = k.get("procs", [])
        self.migs: list[Gpu] = k.get("migs", [])


@pytest.fixture
def nvml(monkeypatch: pytest.MonkeyPatch) -> list[Gpu]:
    gpus: list[Gpu] = []

    def lost_check(h: Gpu) -> int:
        if h.lost:
            raise N.NVMLError(N.NVML_ERROR_GPU_IS_LOST)
        return 60

    calls: dict[str, Any] = {
        "nvmlInit": lambda: None,
        "nvmlDeviceGetCount": lambda: len(gpus),
        "nvmlDeviceGetHandleByIndex": lambda i: gpus[i],
        "nvmlEventSetCreate": lambda: object(),
        "nvmlDeviceRegisterEvents": lambda *_: None,
        "nvmlDeviceGetUUID": lambda h: f"GPU-{gpus.index(h)}",
        "nvmlDeviceGetRemappedRows": lambda h: (0, 0, 0, 0),
        "nvmlDeviceGetRetiredPagesPendingStatus": lambda h: 0,
        "nvmlDeviceGetTemperature": lambda h, _: lost_check(h),
        "nvmlDeviceGetTemperatureThreshold": lambda h, _: 90,
        "nvmlDeviceGetTotalEccErrors": lambda *_: 0,
        "nvmlDeviceGetPowerUsage": lambda h: 300_000,
        "nvmlDeviceGetCurrentClocksEventReasons": lambda h: h.reasons,
        "nvmlDeviceGetNvLinkState": lambda h, link: int(link in h.links),
        "nvmlDeviceGetNvLinkErrorCounter": lambda h, link, kind: h.links[link],
        "nvmlDeviceGetMaxMigDeviceCount": lambda h: len(h.migs),
        "nvmlDeviceGetMigDeviceHandleByIndex": lambda h, k: h.migs[k],
        "nvmlDeviceGetComputeRunningProcesses": lambda h: h.procs,
        "nvmlDeviceGetGraphicsRunningProcesses": lambda h: [],
    }
    for name, fn in calls.items():
        monkeypatch.setattr(N, name, fn)
    return gpus


def test_a_lost_gpu_throttling_and_nvlink_errors_are_read(nvml: list[Gpu]) -> None:
    nvml += [
        Gpu(lost=True),
        Gpu(reasons=0x80 | 0x1),  # power brake (hardware), GPU idle (not hardware)
        Gpu(links={0: 2, 5: 3}),  # links 0 and 5 enabled
    ]
    lost, braked, linked = NvmlSource().read()
    assert lost.lost and not braked.lost
    assert braked.throttled == "power brake" and linked.throttled == ""
    assert linked.nvlink_errors == 5 and braked.nvlink_errors == 0


def test_a_process_on_a_gpu_or_one_of_its_mig_instances_makes_it_busy(nvml: list[Gpu]) -> None:
    nvml += [Gpu(), Gpu(procs=[object()]), Gpu(migs=[Gpu(), Gpu(procs=[object()])])]
    source = NvmlSource()
    assert [source.busy(i) for i in range(3)] == [False, True, True]
    assert source.busy(7)  # a GPU NVML does not list (a fault restored from the Node)


def _smi(folder: Path, code: int, says: str) -> None:
    script = folder / "nvidia-smi"
    script.write_text(f"#!/bin/sh\necho \"$@\" >> {folder}/calls\necho '{says}'\nexit {code}\n")
    script.chmod(0o755)


def test_a_reset_goes_through_nvidia_smi_and_a_refusal_says_why(
    nvml: list[Gpu], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nvml += [Gpu(), Gpu()]
    source = NvmlSource()
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ResetFailed, match="not on the agent's PATH"):
        source.reset(1)
    _smi(tmp_path, 0, "GPU 00000000:01:00.0 was successfully reset.")
    source.reset(1)
    assert (tmp_path / "calls").read_text() == "--gpu-reset -i 1\n"
    _smi(tmp_path, 3, "Unable to reset GPU: in use by another client")
    with pytest.raises(ResetFailed, match="in use by another client"):
        source.reset(0)
    assert os.access(tmp_path / "nvidia-smi", os.X_OK)
    (tmp_path / "nvidia-smi").write_text("\x7fELF not really\n")  # cannot be executed
    with pytest.raises(ResetFailed, match="could not run"):
        source.reset(0)
