"""What the node agent reads of this machine's GPUs through NVML, printed as JSON: each GPU's
reading (temperature, ECC counters, pending retirements, NVLink recovery errors, lost,
hardware throttling), the devices it would map (GPUs and MIG instances), whether a process
holds each GPU, and the XIDs seen within `--xid-wait-ms`. It only reads: it never resets a GPU
or changes its settings or MIG layout.

    .venv/bin/python tools/nvml_read.py [--xid-wait-ms 2000]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from gpucarve.agent.nvml_source import NvmlSource


def main() -> int:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--xid-wait-ms", type=int, default=2000)
    wait = args.parse_args().xid_wait_ms
    try:
        source = NvmlSource()
    except Exception as exc:  # pynvml raises its own errors when libnvidia-ml is missing
        print(f"NVML cannot be used here: {exc}", file=sys.stderr)
        print("fix: run it on a machine with an NVIDIA GPU and its driver", file=sys.stderr)
        return 2
    readings = source.read()
    doc = {
        "gpus": [dataclasses.asdict(r) for r in readings],
        "busy": {r.index: source.busy(r.index) for r in readings},
        "devices": {uuid: slot.unit() for uuid, slot in sorted(source.devices().items())},
        "xids": [dataclasses.asdict(x) for x in source.xids(wait)],
    }
    print(json.dumps(doc, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
