"""Read an NVIDIA device-plugin configuration into gpucarve pool blocks.

Accepted: a ConfigMap of named configurations (the GPU Operator's `devicePlugin.config`, the
plugin chart's `config.map`), or one configuration file (`version: v1`). Per configuration:
`sharing.mps` with replicas wins over `sharing.timeSlicing` (as in the plugin); replicas of
`nvidia.com/gpu` become `sharing: time-slicing|mps` with `replicas`; no sharing becomes
`exclusive`. What gpucarve cannot express is refused with the fix (replicas of MIG instances,
several resources per configuration), and so is what the plugin itself refuses at start
(fewer than 2 replicas, a MIG strategy it does not know, a switch that is not a boolean); a
resource's `rename` and `devices`, which the plugin drops, are named in a note and not
imported. The GPU model and node count are left for the user, since a device-plugin
configuration does not hold them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gpucarve.config.catalog_file import packaged_catalog
from gpucarve.config.yaml_source import YamlDocument, objects_of, parse_yaml, read_yaml_all
from gpucarve.core.catalog import AmbiguousModel, Catalog, UnknownModel
from gpucarve.core.problems import InvalidInput, Problem

MAX_REPLICAS = 100  # as the policy's time-slicing bound
MIG_STRATEGIES = ("none", "single", "mixed")  # the plugin's --mig-strategy
# a sharing block's switches, which the plugin reads as booleans (it fails to start otherwise)
SHARING_SWITCHES = ("renameByDefault", "failRequestsGreaterThanOne")


@dataclass(frozen=True)
class ImportedConfig:
    name: str
    sharing: str  # exclusive | time-slicing | mps
    replicas: int
    notes: tuple[str, ...] = ()
    renamed: bool = True  # replicas published as nvidia.com/gpu.shared
    # the catalog model a configuration named after a GPU (a GFD product name) is for
    model: str | None = None

    def pool_block(self) -> dict[str, Any]:
        # `gpucarve render device-plugin` names its configurations gpucarve-<pool>
        block: dict[str, Any] = {"name": pool_name(self.name.removeprefix("gpucarve-")),
                                 "sharing": self.sharing}  # fmt: skip
        if self.model is not None:
            block["gpuModel"] = self.model
        if self.sharing != "exclusive":
            block["replicas"] = self.replicas
            if not self.renamed:
                block["renameByDefault"] = False
        return block


def pool_name(name: str) -> str:
    """A configuration's name as a valid pool name (a DNS label): `A100-SXM4-80GB` becomes
    `a100-sxm4-80gb`."""
    label = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:63].strip("-")
    return label or "pool"


def _model(name: str, catalog: Catalog) -> str | None:
    """The catalog model a configuration is named after (GFD's product label, an alias)."""
    try:
        return catalog.lookup(name).id
    except (UnknownModel, AmbiguousModel):
        return None


def _problem(path: tuple[str | int, ...], code: str, message: str, fix: str) -> Problem:
    return Problem(path, code, message, fix)


@dataclass
class _Read:
    source: str
    configs: dict[str, Any]
    skipped: list[str]
    problems: list[Problem]


def _configs(path: str | Path) -> _Read:
    """Every configuration in the file, however it is kept: one configuration, a ConfigMap of
    named ones, the device plugin's DaemonSet (its flags and environment), several of these as
    `---` documents or a kubectl List. Objects that hold none are named in `skipped`."""
    docs = read_yaml_all(path, "a device-plugin configuration, ConfigMap or DaemonSet")
    read = _Read(docs[0].source if len(docs) == 1 else str(path), {}, [], [])
    for doc in docs:
        for i, obj in enumerate(objects_of(doc.data)):
            _object(read, doc, obj, i, Path(path).stem)
    if not read.configs and not read.problems:
        operator = any(OPERATOR in x for x in read.skipped)
        read.problems.append(
            _problem(
                (),
                "gpu-operator-config" if operator else "not-device-plugin",
                "no device-plugin configuration, ConfigMap or DaemonSet in the file"
                + (f" ({'; '.join(read.skipped)})" if read.skipped else ""),
                "run `gpucarve import gpu-operator` on it: it reads the GPU Operator's "
                "ClusterPolicy and values"
                if operator
                else "pass the ConfigMap (`kubectl get cm -n gpu-operator NAME -o yaml`), the "
                "plugin's DaemonSet, or one configuration file (`version: v1`)",
            )
        )
    return read


def _object(read: _Read, doc: YamlDocument, obj: Any, index: int, stem: str) -> None:
    kind = obj.get("kind") if isinstance(obj, dict) else None
    name = str(((obj.get("metadata") or {}) if isinstance(obj, dict) else {}).get("name") or "")
    if kind == "ConfigMap":
        _config_map(read, doc, obj, name)
    elif kind == "DaemonSet":
        _daemon_set(read, obj, name)
    elif (
        isinstance(obj, dict)
        and kind is None
        and ("version" in obj or "sharing" in obj or "flags" in obj)
    ):
        read.configs[stem if index == 0 and stem not in read.configs else f"{stem}-{index}"] = obj
    elif kind == "ClusterPolicy":
        read.skipped.append(f"ClusterPolicy {name}: {OPERATOR}")
    else:
        what = f"{kind} {name}".strip() if kind else f"a {type(obj).__name__}"
        read.skipped.append(f"{what}: not a device-plugin configuration, ConfigMap or DaemonSet")


# what a skipped ClusterPolicy is, and the keys a ConfigMap keeps the plugin's MIG strategy under
OPERATOR = "the GPU Operator's configuration (gpucarve import gpu-operator reads it)"
STRATEGY_KEYS = ("migStrategy", "mig-strategy", "MIG_STRATEGY")


def _config_map(read: _Read, doc: YamlDocument, obj: dict[str, Any], name: str) -> None:
    raw = obj.get("data")
    if not isinstance(raw, dict) or not raw:
        read.problems.append(
            _problem(
                (name, "data"),
                "empty-config-map",
                f"ConfigMap {name} has no data",
                "export it with `kubectl get cm NAME -o yaml`",
            )
        )
        return
    for key, text in raw.items():
        if not isinstance(text, str):
            read.problems.append(
                _problem(
                    (name, "data", str(key)),
                    "bad-config",
                    f"data.{key} is not a string",
                    "each key holds one configuration file",
                )
            )
            continue
        parsed = parse_yaml(text, f"{doc.source}: {name}: data.{key}").data
        if str(key) in STRATEGY_KEYS and isinstance(parsed, str):
            # the plugin's MIG strategy kept on its own (the flag's or its environment's
            # name, a bare value): what --mig-strategy would say
            parsed = {"version": "v1", "flags": {"migStrategy": parsed}}
            key = name or str(key)
        if isinstance(parsed, dict) and ("mig-configs" in parsed):
            read.skipped.append(
                f"ConfigMap {name} data.{key}: a mig-parted configuration "
                "(gpucarve mig import reads it)"
            )
            continue
        if str(key) in read.configs:
            read.problems.append(
                _problem(
                    (name, "data", str(key)),
                    "duplicate-config",
                    f"configuration {key!r} is given twice (ConfigMap {name} and an earlier "
                    "object): the device plugin reads one",
                    "pass the ConfigMap the device plugin is pointed at, or rename one key",
                )
            )
            continue
        read.configs[str(key)] = parsed


def _map(value: Any) -> dict[str, Any]:
    """A field that should be a map, or an empty one (a malformed object reads as holding
    nothing, and is then named as such)."""
    return value if isinstance(value, dict) else {}


def _seq(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _daemon_set(read: _Read, obj: dict[str, Any], name: str) -> None:
    """The plugin's flags as its DaemonSet passes them: `--mig-strategy=` arguments or the
    MIG_STRATEGY environment variable (an argument wins, as in the plugin)."""
    spec = _map(_map(_map(obj.get("spec")).get("template")).get("spec"))
    for c in _seq(spec.get("containers")):
        if not isinstance(c, dict) or "device-plugin" not in str(c.get("image", "")) + str(
            c.get("name", "")
        ):
            continue
        strategy = None
        for e in _seq(c.get("env")):
            if isinstance(e, dict) and e.get("name") == "MIG_STRATEGY":
                strategy = str(e.get("value"))
        args = [str(a) for a in [*_seq(c.get("args")), *_seq(c.get("command"))]]
        for i, a in enumerate(args):
            if a.startswith("--mig-strategy="):
                strategy = a.split("=", 1)[1]
            elif a == "--mig-strategy" and i + 1 < len(args):
                strategy = args[i + 1]
        flags = {} if strategy is None else {"migStrategy": strategy}
        read.configs[name or "device-plugin"] = {"version": "v1", "flags": flags}
        return
    read.skipped.append(f"DaemonSet {name}: runs no NVIDIA device plugin container")


def _shares(resource: Any) -> bool:
    # a resource listed is shared: a count under 2 (which the plugin refuses at start) is
    # reported, never read as "no sharing"
    return isinstance(resource, dict)


def _flag_problems(where: tuple[str | int, ...], doc: dict[str, Any]) -> list[Problem]:
    """Values the plugin would refuse at start (so no node would run it as imported)."""
    out = []
    flags = doc.get("flags")
    strategy = flags.get("migStrategy") if isinstance(flags, dict) else None
    if strategy is not None and strategy not in MIG_STRATEGIES:
        out.append(_problem((*where, "flags", "migStrategy"), "unknown-mig-strategy",
                            f"migStrategy {strategy!r}: the device plugin knows "
                            f"{', '.join(MIG_STRATEGIES)}",
                            f"use one of: {', '.join(MIG_STRATEGIES)}"))  # fmt: skip
    sharing = doc.get("sharing")
    for key in ("mps", "timeSlicing"):
        block = sharing.get(key) if isinstance(sharing, dict) else None
        for switch in SHARING_SWITCHES:
            value = block.get(switch) if isinstance(block, dict) else None
            if value is not None and not isinstance(value, bool):
                out.append(_problem((*where, "sharing", key, switch), "not-a-switch",
                                    f"{switch} {value!r} is not true or false",
                                    f"write {switch}: true or {switch}: false"))  # fmt: skip
    return out


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


def _dropped(res: dict[str, Any], renamed: bool) -> list[str]:
    out = []
    if res.get("rename") not in (None, "", f"{res['name']}.shared" if renamed else None):
        out.append(f"rename {res.get('rename')!r} ignored: the device plugin drops it; "
                   "renameByDefault: true publishes nvidia.com/gpu.shared")  # fmt: skip
    if res.get("devices") not in (None, "all"):
        out.append(f"devices {res.get('devices')!r} ignored: the device plugin shares every "
                   "GPU of the node")  # fmt: skip
    return out


def _unshareable(where: tuple[str | int, ...], name: Any) -> Problem:
    if str(name).startswith("nvidia.com/mig-"):
        return _problem(
            where,
            "shared-mig",
            f"replicas of {name!r}: gpucarve shares whole GPUs, not MIG instances",
            "share whole GPUs (nvidia.com/gpu), or use a MIG layout for this pool",
        )
    return _problem(where, "unknown-resource",
                    f"replicas of {name!r}: the NVIDIA device plugin shares nvidia.com/gpu "
                    "(or MIG instances)",
                    "write name: nvidia.com/gpu")  # fmt: skip


def one_config(name: str, doc: Any, problems: list[Problem]) -> ImportedConfig | None:
    """One named configuration as a pool (its model when the name is a GPU's)."""
    got = _one(name, doc, problems)
    return None if got is None else replace(got, model=_model(name, packaged_catalog()))


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
    malformed = _malformed_sharing(where, sharing) or _flag_problems(where, doc)
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
        flags = doc.get("flags")
        strategy = flags.get("migStrategy") if isinstance(flags, dict) else None
        if strategy in ("mixed", "single"):
            notes.append(
                f"migStrategy {strategy}: GPUs without MIG are whole GPUs here; where they run "
                "MIG, make the pool `sharing: mig` with its layout (gpucarve mig import reads "
                "the MIG manager's configuration)"
                + ("; single: add `mig: {strategy: single}`" if strategy == "single" else "")
            )
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
        problems.append(_unshareable((*path, 0, "name"), res.get("name")))
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
    # the plugin drops a resource's own `rename` and `devices` (DisableResourceNamingInConfig):
    # only renameByDefault renames, and every GPU of the node is shared
    renamed = sharing[key].get("renameByDefault") is True
    notes += _dropped(res, renamed)
    if not renamed:
        notes.append(
            "shared GPUs are advertised as nvidia.com/gpu (renameByDefault: false): the pool "
            "keeps that, and pods asking nvidia.com/gpu get replicas there"
        )
    return ImportedConfig(name, mode, replicas, tuple(notes), renamed)


def import_device_plugin(path: str | Path) -> list[ImportedConfig]:
    read = _configs(path)
    problems = list(read.problems)
    out = [
        c for name, doc in sorted(read.configs.items()) if (c := one_config(name, doc, problems))
    ]
    if problems:
        raise InvalidInput(read.source, problems)
    if read.skipped:
        # never dropped in silence: said with the first configuration's notes
        first = out[0]
        out[0] = replace(first, notes=(*first.notes, *(f"skipped {s}" for s in read.skipped)))
    return out
