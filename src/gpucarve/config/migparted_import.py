"""Read a mig-parted configuration (`version: v1`, `mig-configs`) into pool `mig:` blocks.

For one named configuration, each entry's GPU model comes from its `device-filter` (PCI device
IDs matched against the catalog) or from the model the caller names; `devices: all` becomes a
`layout`, index lists become `perGpu` entries. Every layout is checked against the model's MIG
geometry; problems name the configuration, the entry and the fix.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpucarve.config.yaml_source import read_yaml
from gpucarve.core.catalog import Catalog, GpuModel
from gpucarve.core.mig import place
from gpucarve.core.problems import InvalidInput, Problem


def _problem(path: tuple[str | int, ...], code: str, message: str, fix: str) -> Problem:
    return Problem(path, code, message, fix)


MAX_PCI_ID = 0xFFFFFFFF


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _device_ids(filt: Any) -> set[str] | None:
    """The PCI IDs of a `device-filter` (one or a list). YAML reads an unquoted 0x20B510DE as
    the integer 548737246: it is the same ID, written back in the catalog's hex form. None:
    not a filter."""
    items = filt if isinstance(filt, list) else [filt]
    out: set[str] = set()
    for item in items:
        if isinstance(item, bool):
            return None
        if isinstance(item, int):
            if not 0 <= item <= MAX_PCI_ID:
                return None
            out.add(f"0X{item:08X}")
        elif isinstance(item, str) and item.strip():
            out.add(item.strip().upper())
        else:
            return None
    return out


def _models_for(
    entry: dict[str, Any], catalog: Catalog, model: GpuModel | None, where: tuple[str | int, ...]
) -> tuple[list[GpuModel], list[Problem]]:
    filt = entry.get("device-filter")
    if filt is None:
        return ([model] if model is not None else []), []
    ids = _device_ids(filt)
    if ids is None:
        return [], [
            _problem(
                (*where, "device-filter"),
                "bad-device-filter",
                f"device-filter is {_shown(filt)}",
                'a PCI device ID or a list of them, e.g. "0x20B510DE"',
            )
        ]
    return [m for m in catalog.models if ids & {p.upper() for p in m.pci_device_ids}], []


def _read(path: str | Path) -> tuple[str, dict[str, list[Any]]]:
    doc = read_yaml(path, "a mig-parted YAML file")
    data = doc.data
    if not isinstance(data, dict) or data.get("version") != "v1" or "mig-configs" not in data:
        raise InvalidInput(
            doc.source,
            [
                _problem(
                    (),
                    "not-mig-parted",
                    "not a mig-parted configuration",
                    "expect `version: v1` and a `mig-configs:` map",
                )
            ],
        )
    raw = data["mig-configs"]
    problems: list[Problem] = []
    if not isinstance(raw, dict):
        problems.append(
            _problem(
                ("mig-configs",),
                "not-mig-parted",
                f"mig-configs is a {type(raw).__name__}, not a map of configurations",
                "write `mig-configs: {all-1g.10gb: [{devices: all, ...}]}`",
            )
        )
        raise InvalidInput(doc.source, problems)
    # mig-parted's names are strings; YAML reads `5:` as the integer 5
    configs = {str(k): v for k, v in raw.items()}
    for name, entries in configs.items():
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            problems.append(
                _problem(
                    ("mig-configs", name),
                    "bad-config",
                    f"configuration {name!r} is {_shown(entries)}, not a list of entries",
                    "write a list: [{devices: all, mig-enabled: true, mig-devices: {...}}]",
                )
            )
    if problems:
        raise InvalidInput(doc.source, problems)
    return doc.source, configs


def _chosen(source: str, configs: Mapping[str, Any], config: str | None) -> str:
    """The configuration to import: the one named, or the only one."""
    if config is None:
        if len(configs) != 1:
            raise InvalidInput(
                source,
                [
                    _problem(
                        ("mig-configs",),
                        "which-config",
                        f"{len(configs)} configurations: {', '.join(sorted(configs))}",
                        "name one with --config",
                    )
                ],
            )
        config = next(iter(configs))
    if config not in configs:
        raise InvalidInput(
            source,
            [
                _problem(
                    ("mig-configs", config),
                    "unknown-config",
                    f"no configuration {config!r}",
                    f"one of {', '.join(sorted(configs))}",
                )
            ],
        )
    return config


def import_mig_config(
    path: str | Path, catalog: Catalog, config: str | None = None, model: GpuModel | None = None
) -> dict[str, dict[str, Any]]:
    """model id -> the pool `mig:` block (`layout` or `perGpu`) of the chosen configuration."""
    source, configs = _read(path)
    config = _chosen(source, configs, config)
    out: dict[str, dict[str, Any]] = {}
    problems: list[Problem] = []
    for i, entry in enumerate(configs[config]):
        where: tuple[str | int, ...] = ("mig-configs", config, i)
        if entry.get("mig-enabled") is not True:
            continue
        models, bad = _models_for(entry, catalog, model, where)
        problems.extend(bad)
        if bad:
            continue
        if not models:
            problems.append(
                _problem(
                    (*where, "device-filter"),
                    "unknown-device",
                    "no GPU model of the catalog matches this entry",
                    "pass --model, or add the model's PCI IDs to a catalog file",
                )
            )
            continue
        raw = entry.get("mig-devices") or {}
        if not isinstance(raw, dict) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in raw.values()
        ):
            problems.append(
                _problem(
                    (*where, "mig-devices"),
                    "bad-mig-devices",
                    f"mig-devices is {_shown(raw)}",
                    'a map of profile to count, e.g. {"1g.10gb": 7}',
                )
            )
            continue
        counts = {str(k): v for k, v in raw.items() if v}
        for m in models:
            if m.mig is None:
                problems.append(
                    _problem(
                        where,
                        "no-mig",
                        f"{m.id} has no MIG, but the entry enables it",
                        "pass --model with a MIG-capable GPU (A100, A30, H100, H200, B200, ...)",
                    )
                )
                continue
            result = place(m.mig, counts)
            if not result.ok:
                problems.append(
                    _problem(
                        (*where, "mig-devices"),
                        "bad-layout",
                        f"{m.id}: " + "; ".join(result.reasons),
                        f"`gpucarve mig layouts {m.id}` lists the valid ones",
                    )
                )
                continue
            block = out.setdefault(m.id, {})
            devices = entry.get("devices")
            if devices == "all":
                block["layout"] = counts
            elif isinstance(devices, list) and all(isinstance(d, int) for d in devices):
                block.setdefault("perGpu", []).append({"gpus": devices, "layout": counts})
            else:
                problems.append(
                    _problem(
                        (*where, "devices"),
                        "bad-devices",
                        f"devices {_shown(devices)}: only `all` or a list of GPU indices maps "
                        "to a pool",
                        "use `all` or [0, 1, ...]",
                    )
                )
    if problems:
        raise InvalidInput(source, problems)
    if not out:
        raise InvalidInput(
            source,
            [
                _problem(
                    ("mig-configs", config),
                    "no-mig-entry",
                    f"configuration {config!r} has no entry with `mig-enabled: true`",
                    "name a configuration that enables MIG with --config",
                )
            ],
        )
    return out
