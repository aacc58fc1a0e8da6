"""Read a mig-parted configuration (`version: v1`, `mig-configs`) into pool `mig:` blocks.

For one named configuration, each entry's GPU model comes from its `device-filter` (PCI device
IDs matched against the catalog) or from the model the caller names; `devices: all` becomes a
`layout`, index lists become `perGpu` entries. Every layout is checked against the model's MIG
geometry; problems name the configuration, the entry and the fix.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpucarve.config.yaml_source import objects_of, parse_yaml, read_yaml_all
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


def _read(path: str | Path) -> tuple[str, dict[str, list[Any]], list[str]]:
    """The configurations of every mig-parted file in `path`, however it is kept: the file
    itself, a ConfigMap holding it (the GPU Operator's `custom-mig-config`), several of these
    as `---` documents or a kubectl List. Objects that hold none are named in the notes."""
    docs = read_yaml_all(path, "a mig-parted YAML file or ConfigMap")
    source = docs[0].source if len(docs) == 1 else str(path)
    configs: dict[str, list[Any]] = {}
    notes: list[str] = []
    problems: list[Problem] = []
    for doc in docs:
        for obj in objects_of(doc.data):
            for where, data in _mig_parted_in(obj, doc.source, notes):
                configs.update(_configs_of(data, where, problems))
    if problems:
        raise InvalidInput(source, problems)
    if not configs:
        said = f" ({'; '.join(notes)})" if notes else ""
        raise InvalidInput(
            source,
            [
                _problem(
                    (),
                    "not-mig-parted",
                    "no mig-parted configuration in the file" + said,
                    "expect `version: v1` and a `mig-configs:` map, or the ConfigMap holding it "
                    "(`kubectl get cm -n gpu-operator NAME -o yaml`)",
                )
            ],
        )
    return source, configs, notes


def _mig_parted_in(obj: Any, source: str, notes: list[str]) -> list[tuple[tuple[str, ...], Any]]:
    """(where, parsed mig-parted document) for what `obj` holds."""
    if isinstance(obj, dict) and "mig-configs" in obj:
        return [((), obj)]
    kind = obj.get("kind") if isinstance(obj, dict) else None
    name = str(((obj.get("metadata") or {}) if isinstance(obj, dict) else {}).get("name") or "")
    if kind == "ConfigMap" and isinstance(obj.get("data"), dict):
        out: list[tuple[tuple[str, ...], Any]] = []
        for key, text in obj["data"].items():
            parsed = parse_yaml(str(text), f"{source}: {name}: data.{key}").data
            if isinstance(parsed, dict) and "mig-configs" in parsed:
                out.append(((name, "data", str(key)), parsed))
            else:
                notes.append(f"ConfigMap {name} data.{key}: not a mig-parted configuration")
        return out
    what = f"{kind} {name}".strip() if kind else f"a {type(obj).__name__}"
    notes.append(f"{what}: not a mig-parted configuration or a ConfigMap holding one")
    return []


def _configs_of(
    data: dict[str, Any], where: tuple[str, ...], problems: list[Problem]
) -> dict[str, list[Any]]:
    if data.get("version") != "v1":
        problems.append(
            _problem(
                (*where, "version"),
                "not-mig-parted",
                f"version {data.get('version')!r}: mig-parted reads v1",
                "write `version: v1`",
            )
        )
        return {}
    raw = data["mig-configs"]
    if not isinstance(raw, dict):
        problems.append(
            _problem(
                (*where, "mig-configs"),
                "not-mig-parted",
                f"mig-configs is a {type(raw).__name__}, not a map of configurations",
                "write `mig-configs: {all-1g.10gb: [{devices: all, ...}]}`",
            )
        )
        return {}
    # mig-parted's names are strings; YAML reads `5:` as the integer 5
    configs = {str(k): v for k, v in raw.items()}
    for name, entries in configs.items():
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            problems.append(
                _problem(
                    (*where, "mig-configs", name),
                    "bad-config",
                    f"configuration {name!r} is {_shown(entries)}, not a list of entries",
                    "write a list: [{devices: all, mig-enabled: true, mig-devices: {...}}]",
                )
            )
    return configs


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
    source, configs, _ = _read(path)
    config = _chosen(source, configs, config)
    out, _, problems = _blocks(configs, config, catalog, model)
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


@dataclass(frozen=True)
class MigImport:
    # configuration -> model id -> the pool `mig:` block
    configs: dict[str, dict[str, dict[str, Any]]]
    # configuration -> GPUs it leaves without MIG (said, never dropped)
    whole: dict[str, list[str]]
    notes: list[str]


def import_mig_configs(
    path: str | Path, catalog: Catalog, model: GpuModel | None = None
) -> MigImport:
    """Every configuration of every mig-parted file in `path` at once."""
    source, configs, notes = _read(path)
    out: dict[str, dict[str, dict[str, Any]]] = {}
    whole: dict[str, list[str]] = {}
    problems: list[Problem] = []
    for name in sorted(configs):
        blocks, plain, bad = _blocks(configs, name, catalog, model)
        if bad and all(p.code == "unknown-device" for p in bad):
            # not an error of the file: this configuration's GPUs are named by nothing in it
            notes.append(
                f"configuration {name}: {len(bad)} entries name no GPU model (no "
                "device-filter): pass --model to read them"
            )
            continue
        problems += bad
        out[name] = blocks
        if plain:
            whole[name] = plain
    if problems:
        raise InvalidInput(source, problems)
    return MigImport(out, whole, notes)


def _blocks(
    configs: Mapping[str, list[Any]], config: str, catalog: Catalog, model: GpuModel | None
) -> tuple[dict[str, dict[str, Any]], list[str], list[Problem]]:
    """One configuration's `mig:` blocks per model, the GPUs it leaves without MIG (as
    mig-parted's `devices`), and its problems."""
    out: dict[str, dict[str, Any]] = {}
    whole: list[str] = []
    problems: list[Problem] = []
    for i, entry in enumerate(configs[config]):
        where: tuple[str | int, ...] = ("mig-configs", config, i)
        if entry.get("mig-enabled") is not True:
            whole.append(f"devices {_shown(entry.get('devices'))}")
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
    return out, whole, problems
