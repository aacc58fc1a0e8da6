"""Read a mig-parted configuration (`version: v1`, `mig-configs`) into pool `mig:` blocks.

For one named configuration, each entry's GPU model comes from its `device-filter` (PCI device
IDs matched against the catalog) or from the model the caller names; `devices: all` becomes a
`layout`, index lists become `perGpu` entries. Every layout is checked against the model's MIG
geometry; problems name the configuration, the entry and the fix.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gpucarve.core.catalog import Catalog, GpuModel
from gpucarve.core.mig import place
from gpucarve.core.problems import InvalidInput, Problem


def _problem(path: tuple[str | int, ...], code: str, message: str, fix: str) -> Problem:
    return Problem(path, code, message, fix)


def _models_for(entry: dict[str, Any], catalog: Catalog, model: GpuModel | None) -> list[GpuModel]:
    filt = entry.get("device-filter")
    if filt is None:
        return [model] if model is not None else []
    ids = {f.upper() for f in ([filt] if isinstance(filt, str) else filt)}
    return [m for m in catalog.models if ids & {p.upper() for p in m.pci_device_ids}]


def import_mig_config(
    path: str | Path, catalog: Catalog, config: str | None = None, model: GpuModel | None = None
) -> dict[str, dict[str, Any]]:
    """model id -> the pool `mig:` block (`layout` or `perGpu`) of the chosen configuration."""
    source = str(path)
    try:
        doc = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InvalidInput(
            source, [_problem((), "file-not-found", "no such file", "check the path")]
        ) from None
    except yaml.YAMLError as exc:
        raise InvalidInput(source, [_problem((), "bad-yaml", str(exc), "fix the YAML")]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(
            source,
            [_problem((), "file-unreadable", f"cannot read: {exc}", "pass a mig-parted YAML file")],
        ) from None
    if (
        not isinstance(doc, dict)
        or doc.get("version") != "v1"
        or not isinstance(doc.get("mig-configs"), dict)
    ):
        raise InvalidInput(
            source,
            [
                _problem(
                    (),
                    "not-mig-parted",
                    "not a mig-parted configuration",
                    "expect `version: v1` and a `mig-configs:` map",
                )
            ],
        )
    configs: dict[str, Any] = doc["mig-configs"]
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
    out: dict[str, dict[str, Any]] = {}
    problems: list[Problem] = []
    for i, entry in enumerate(configs[config] or []):
        where: tuple[str | int, ...] = ("mig-configs", config, i)
        if not isinstance(entry, dict) or not entry.get("mig-enabled"):
            continue
        models = _models_for(entry, catalog, model)
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
                    f"mig-devices is {raw!r}",
                    'a map of profile to count, e.g. {"1g.10gb": 7}',
                )
            )
            continue
        counts = {str(k): v for k, v in raw.items() if v}
        for m in models:
            if m.mig is None:
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
                        f"devices {devices!r}: only `all` or a list of GPU indices maps to a pool",
                        "use `all` or [0, 1, ...]",
                    )
                )
    if problems:
        raise InvalidInput(source, problems)
    return out
