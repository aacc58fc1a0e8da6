"""Node and pod lists of the fill experiment written for a test."""

from __future__ import annotations

from pathlib import Path

NODES_HEAD = "sn,cpu_milli,memory_mib,gpu,model\n"
PODS_HEAD = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p
