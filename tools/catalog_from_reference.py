"""Regenerate src/gpucarve/data/gpu-catalog.yaml from the shared reference file.

Usage: python tools/catalog_from_reference.py ../shared/reference/gpu-models.yaml

The reference is the source of facts; this script only reshapes it into gpucarve's catalog
format and adds what gpucarve needs on top (flavor prefixes, GFD product labels, aliases).
Values the reference leaves null stay null, or are marked `estimated` where gpucarve needs a
number to work with.
"""

from __future__ import annotations

import sys
from typing import Any

import yaml

# gpucarve-specific naming: the flavor prefix, the GFD product label values (the sanitised
# NVML device name, see reference/sharing-formats.md section 7) and extra aliases. Aliases shared by
# several models are deliberate: looking them up reports the ambiguity instead of guessing.
EXTRA: dict[str, dict[str, Any]] = {
    "A100-SXM4-40GB": {
        "flavorPrefix": "a100-40gb",
        "gfd": ["NVIDIA-A100-SXM4-40GB", "NVIDIA-A100-PCIE-40GB"],
        "aliases": ["A100-40GB", "A100-PCIE-40GB", "A100-SXM4-40GB", "A100"],
    },
    "A100-80GB": {
        "flavorPrefix": "a100",
        "gfd": ["NVIDIA-A100-SXM4-80GB", "NVIDIA-A100-80GB-PCIe"],
        "aliases": ["A100-SXM4-80GB", "A100-PCIE-80GB", "A100"],
    },
    "A30-24GB": {"flavorPrefix": "a30", "gfd": ["NVIDIA-A30"], "aliases": ["A30"]},
    "A10": {"flavorPrefix": "a10", "gfd": ["NVIDIA-A10"], "aliases": ["A10-24GB"]},
    "H100-SXM5-80GB": {
        "flavorPrefix": "h100",
        "gfd": ["NVIDIA-H100-80GB-HBM3"],
        "aliases": ["H100-SXM5", "H100-SXM", "H100-80GB-HBM3", "H100-80GB", "H100"],
    },
    "H100-PCIe-80GB": {
        "flavorPrefix": "h100-pcie",
        "gfd": ["NVIDIA-H100-PCIe"],
        "aliases": ["H100-PCIe", "H100-80GB", "H100"],
    },
    "H100-NVL-94GB": {
        "flavorPrefix": "h100-nvl",
        "gfd": ["NVIDIA-H100-NVL"],
        "aliases": ["H100-NVL", "H100"],
    },
    "H200-141GB": {
        "flavorPrefix": "h200",
        "gfd": ["NVIDIA-H200", "NVIDIA-H200-NVL"],
        "aliases": ["H200", "H200-SXM5-141GB", "H200-NVL"],
    },
    "GH200-96GB": {
        "flavorPrefix": "gh200",
        "gfd": ["NVIDIA-GH200-120GB", "NVIDIA-GH200-480GB"],
        "aliases": ["GH200"],
    },
    "GH200-144GB": {
        "flavorPrefix": "gh200-144gb",
        "gfd": ["NVIDIA-GH200-144G-HBM3e"],
        "aliases": ["GH200"],
    },
    "B200-180GB": {"flavorPrefix": "b200", "gfd": ["NVIDIA-B200"], "aliases": ["B200"]},
    "L40S": {"flavorPrefix": "l40s", "gfd": ["NVIDIA-L40S"], "aliases": ["L40S-48GB"]},
    "L4": {"flavorPrefix": "l4", "gfd": ["NVIDIA-L4"], "aliases": ["L4-24GB"]},
    "RTX-4090": {
        "flavorPrefix": "rtx4090",
        "gfd": ["NVIDIA-GeForce-RTX-4090"],
        "aliases": ["RTX4090", "GeForce-RTX-4090"],
    },
    "T4": {"flavorPrefix": "t4", "gfd": ["Tesla-T4"], "aliases": ["T4-16GB"]},
}

V100_VARIANTS = {
    "V100-16GB": (16, ["Tesla-V100-SXM2-16GB", "Tesla-V100-PCIE-16GB"], "v100-16gb"),
    "V100-32GB": (32, ["Tesla-V100-SXM2-32GB", "Tesla-V100-PCIE-32GB"], "v100"),
}

MIB_PER_GB = 1000**3 / 2**20


def price(model: dict[str, Any]) -> tuple[float | None, str | None]:
    values = (model.get("price_usd_per_gpu_hour") or {}).get("values") or []
    # First catalog row that is an on-demand list price; capacity blocks are not on-demand.
    for row in values:
        if row.get("provider") != "aws_capacity_block":
            where = f"{row['provider']} {row['instance']}"
            if row.get("derived_from"):
                where += f" ({row['derived_from']})"
            return float(row["usd"]), f"indicative on-demand list price, {where}"
    return None, None


def profile(p: dict[str, Any], gpu_mem_mib: int, mem_slices: int) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": p["name"],
        "profileId": p.get("profile_id"),
        "computeSlices": p["compute_slices"],
        "memorySlices": p["memory_slices"],
    }
    if p.get("memory_gib") is not None:
        out["memoryMiB"] = round(p["memory_gib"] * 1024)
    else:
        # Not observed: proportional share of the GPU's memory, marked as an estimate.
        out["memoryMiB"] = gpu_mem_mib * p["memory_slices"] // mem_slices
        out["memoryEstimated"] = True
    out["smCount"] = p.get("sm_count")
    out["maxInstances"] = p["max_instances"]
    out["starts"] = list(p["placements"]["starts"])
    assert p["placements"]["size"] == p["memory_slices"], p
    out["placementsVerified"] = bool(p.get("placements_verified"))
    return out


def convert(model: dict[str, Any], mid: str, extra: dict[str, Any], mem_gb: int) -> dict[str, Any]:
    out: dict[str, Any] = {"id": mid, "flavorPrefix": extra["flavorPrefix"]}
    out["aliases"] = extra["aliases"]
    out["gfdProducts"] = extra["gfd"]
    pci = [str(x).split(" ")[0] for x in model.get("pci_device_ids") or []]
    if pci:
        out["pciDeviceIds"] = pci
    out["architecture"] = model["architecture"]
    out["computeCapability"] = str(model["compute_capability"])
    out["memoryGB"] = mem_gb
    reported = model.get("memory_mib_reported")
    if isinstance(reported, dict):
        reported = reported.get(f"{mem_gb}GB")
    if reported is None and model.get("mig_profiles"):
        full = max(model["mig_profiles"], key=lambda p: p["memory_slices"])
        if full.get("memory_gib") is not None:
            reported = round(full["memory_gib"] * 1024)
    if reported is None:
        out["memoryMiB"] = int(mem_gb * MIB_PER_GB)
        out["memoryEstimated"] = True
    else:
        out["memoryMiB"] = int(reported)
    out["smCount"] = model["sm_count"]
    nv = model.get("nvlink") or {}
    out["nvlink"] = bool(nv.get("present"))
    usd, note = price(model)
    out["pricePerGpuHour"] = usd
    if note:
        out["priceNote"] = note
    if model.get("mig_supported"):
        mem_slices = int(model.get("memory_slices_total", 8))
        mig: dict[str, Any] = {
            "memorySlices": mem_slices,
            "computeSlices": int(model.get("compute_slices_total", 7)),
            "smCount": model.get("sm_count_mig_max"),
            "profiles": [profile(p, out["memoryMiB"], mem_slices) for p in model["mig_profiles"]],
        }
        out["mig"] = mig
    out["source"] = ", ".join(model.get("source") or [])
    return out


def main(path: str) -> None:
    with open(path, encoding="utf-8") as fh:
        ref = yaml.safe_load(fh)
    models = []
    for m in ref["models"]:
        if m["id"] == "V100":
            for mid, (gb, gfd, prefix) in V100_VARIANTS.items():
                extra = {"flavorPrefix": prefix, "gfd": gfd, "aliases": ["V100"]}
                models.append(convert(m, mid, extra, gb))
            continue
        models.append(convert(m, m["id"], EXTRA[m["id"]], int(m["memory_gb_nominal"])))
    doc = {
        "apiVersion": "gpucarve.io/v1alpha1",
        "kind": "GpuCatalog",
        "models": models,
    }
    header = (
        "# gpucarve's packaged GPU catalog. GENERATED by tools/catalog_from_reference.py from\n"
        "# the project's reference data (shared/reference/gpu-models.yaml), which was compiled\n"
        "# from NVIDIA's MIG user guide, public `nvidia-smi mig -lgip/-lgipp` and deviceQuery\n"
        "# outputs, NVIDIA/gpu-operator and mig-parted configs, and a cloud price catalog.\n"
        "# Prices are indicative USD per GPU-hour; override them in your own catalog file.\n"
        "# `*Estimated: true` marks values that were not observed and are derived.\n"
    )
    sys.stdout.write(header)
    sys.stdout.write(yaml.safe_dump(doc, sort_keys=False, width=110, default_flow_style=None))


if __name__ == "__main__":
    main(sys.argv[1])
