"""Read an NVIDIA device-plugin configuration into gpucarve pool blocks.

Accepted: a ConfigMap of named configurations (the GPU Operator's `devicePlugin.config`, the
plugin chart's `config.map`), or one configuration file (`version: v1`). Per configuration:
`sharing.mps` with replicas wins over `sharing.timeSlicing` (as in the plugin); replicas of
`nvidia.com/gpu` become `sharing: time-slicing|mps` with `replicas`; no sharing becomes
`exclusive`. What gpucarve cannot express is refused with the fix (replicas of MIG instances,
several resources per configuration); the GPU model and node count are left for the user,
since a device-plugin configuration does not hold them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpucarve.config.yaml_source import parse_yaml, read_yaml
from gpucarve.core.problems import InvalidInput, Problem

MAX_REPLICAS = 100  # as the policy's time-slicing bound


@dataclass(frozen=True)
class ImportedConfig:
    name: str
    sharing: str  # exclusive | time-slicing | mps
    replicas: int
    notes: tuple[str, ...] = ()
    renamed: bool = True  # replicas published as nvidia.com/gpu.shared

    def pool_block(self) -> dict[str, Any]:
        # `gpucarve render device-plugin` names its configurations gpucarve-<pool>
        block: dict[str, Any] = {"name": self.name.removeprefix("gpucarve-"),
                                 "sharing": self.sharing}  # fmt: skip
        if self.sharing != "exclusive":
            block["replicas"] = self.replicas
            if not self.renamed:
                block["renameByDefault"] = False
        return block


def _problem(path: tuple[str | int, ...], code: str, message: str, fix: str) -> Problem:
    return Problem(path, code, message, fix)


def _configs(path: str | Path) -> tuple[str, dict[str, Any]]:
    doc = read_yaml(path, "a device-plugin configuration or ConfigMap")
    data = doc.data
    if isinstance(data, dict) and data.get("kind") == "ConfigMap":
        raw = data.get("data")
        if not isinstance(raw, dict) or not raw:
            raise InvalidInput(
                doc.source,
                [
                    _problem(
                        ("data",),
                        "empty-config-map",
                        "the ConfigMap has no data",
                        "export it with `kubectl get cm NAME -o yaml`",
                    )
                ],
            )
        out: dict[str, Any] = {}
        for key, text in raw.items():
            if not isinstance(text, str):
                raise InvalidInput(
                    doc.source,
                    [
                        _problem(
                            ("data", str(key)),
                            "bad-config",
                            f"data.{key} is not a string",
                            "each key holds one configuration file",
                        )
                    ],
                )
            out[str(key)] = parse_yaml(text, f"{doc.source}: data.{key}").data
        return doc.source, out
    if isinstance(data, dict) and ("version" in data or "sharing" in data or "flags" in data):
        return doc.source, {Path(path).stem: data}
    raise InvalidInput(
        doc.source,
        [
            _problem(
                (),
                "not-device-plugin",
                "neither a ConfigMap nor a device-plugin configuration (`version: v1`)",
                "pass the ConfigMap (`kubectl get cm -n gpu-operator NAME -o yaml`) or one file",
            )
        ],
    )


def _shares(resource: Any) -> bool:
    if not isinstance(resource, dict):
        return False
    n = resource.get("replicas")
    return not isinstance(n, int) or n > 1  # a bad count is reported, not skipped


def _malformed_sharing(where: tuple[str | int, ...], sharing: Any) -> list[Problem]:
    """A `sharing:` block of the wrong shape is refused, never read as no sharing."""
    fix = "write sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: N}]}}"
    if not isinstance(sharing, dict):
        return [_problem((*where, "sharing"), "bad-config", "sharing is not a map", fix)]
    out = []
    for key in ("mps", "timeSlicing"):
        block = sharing.get(key)
        if block is None:
            continue
        if not isinstance(block, dict):
            out.append(_problem((*where, "sharing", key), "bad-config",
                                f"sharing.{key} is not a map", fix))  # fmt: skip
            continue
        resources = block.get("resources")
        if resources is not None and (
            not isinstance(resources, list) or not all(isinstance(r, dict) for r in resources)
        ):
            out.append(_problem((*where, "sharing", key, "resources"), "bad-config",
                                f"sharing.{key}.resources is not a list of maps", fix))  # fmt: skip
    return out


def _one(name: str, doc: Any, problems: list[Problem]) -> ImportedConfig | None:
    where: tuple[str | int, ...] = (name,)
    if not isinstance(doc, dict):
        problems.append(
            _problem(
                where,
                "bad-config",
                f"configuration {name!r} is not a map",
                "write `version: v1` with `sharing:`",
            )
        )
        return None
    if doc.get("version", "v1") not in ("v1", ""):
        problems.append(
            _problem(
                (*where, "version"),
                "bad-version",
                f"version {doc.get('version')!r}: the plugin reads only v1",
                "write `version: v1`",
            )
        )
        return None
    sharing = doc.get("sharing") or {}
    malformed = _malformed_sharing(where, sharing)
    if malformed:
        problems += malformed
        return None
    notes: list[str] = []
    chosen = None
    for key, mode in (("mps", "mps"), ("timeSlicing", "time-slicing")):
        block = sharing.get(key) if isinstance(sharing, dict) else None
        resources = (block or {}).get("resources") if isinstance(block, dict) else None
        if isinstance(resources, list) and any(_shares(r) for r in resources):
            if chosen is None:
                chosen = (key, mode, resources)
            else:
                notes.append(f"sharing.{key} ignored: the plugin uses sharing.{chosen[0]}")
    if chosen is None:
        return ImportedConfig(name, "exclusive", 1, tuple(notes))
    key, mode, resources = chosen
    path = (*where, "sharing", key, "resources")
    if len(resources) != 1:
        problems.append(
            _problem(
                path,
                "several-resources",
                f"{len(resources)} shared resources; a gpucarve pool shares one kind of GPU",
                "split the nodes into one pool per resource",
            )
        )
        return None
    res = resources[0]
    if not isinstance(res, dict):
        problems.append(
            _problem(
                path, "bad-config", "a resource is not a map", "write {name: ..., replicas: N}"
            )
        )
        return None
    if res.get("name") != "nvidia.com/gpu":
        problems.append(
            _problem(
                (*path, 0, "name"),
                "shared-mig",
                f"replicas of {res.get('name')!r}: gpucarve shares whole GPUs, not MIG instances",
                "share whole GPUs (nvidia.com/gpu), or use a MIG layout for this pool",
            )
        )
        return None
    replicas = res.get("replicas")
    if not isinstance(replicas, int) or not 2 <= replicas <= MAX_REPLICAS:
        problems.append(
            _problem(
                (*path, 0, "replicas"),
                "bad-replicas",
                f"replicas {replicas!r}",
                f"write a whole number from 2 to {MAX_REPLICAS}",
            )
        )
        return None
    renamed = bool(sharing[key].get("renameByDefault") or res.get("rename"))
    if not renamed:
        notes.append(
            "shared GPUs are advertised as nvidia.com/gpu (renameByDefault: false): the pool "
            "keeps that, and pods asking nvidia.com/gpu get replicas there"
        )
    return ImportedConfig(name, mode, replicas, tuple(notes), renamed)


def import_device_plugin(path: str | Path) -> list[ImportedConfig]:
    source, configs = _configs(path)
    problems: list[Problem] = []
    out = [c for name, doc in sorted(configs.items()) if (c := _one(name, doc, problems))]
    if problems:
        raise InvalidInput(source, problems)
    return out
