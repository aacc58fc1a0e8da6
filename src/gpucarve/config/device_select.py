"""Which DRA flavors a ResourceClaim's device request can be served by: its device class and
the CEL selectors it carries, judged on the devices of each flavor.

Kubernetes judges a request's selectors (`device.attributes["gpu.nvidia.com"].productName ==
"NVIDIA H100 80GB HBM3"`, `device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi"))
>= 0`) device by device. gpucarve places by flavor, so it judges them on each flavor's devices
as they differ from one another: every attribute and capacity the driver publishes except the
ones that name one device (its uuid, PCI address), which no selector gpucarve honours may read.
On a cluster the devices are those NVIDIA's DRA driver published in ResourceSlices; for `plan`
and `simulate` they are made from the catalog as the driver would publish them
(`catalog_device`). The expressions run on cel-python with Kubernetes' quantity functions.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import celpy
from celpy import celtypes
from celpy.adapter import json_to_cel
from celpy.celparser import CELParseError
from celpy.evaluation import CELEvalError, CELFunction
from lark import Token, Tree

from gpucarve.core.amounts import FlavorName
from gpucarve.core.catalog import GpuModel
from gpucarve.core.policy import Policy
from gpucarve.core.quantity import QuantityError, parse_quantity
from gpucarve.core.vocabulary import DRA_GPU_DRIVER

MIB = 1024 * 1024
# Attributes that name one device: a selector on them picks devices, not a kind of device.
IDENTITY = frozenset({"uuid", "pcieBusID", "parentUUID"})
MAX_SELECTOR_CHARS = 10_240  # Kubernetes' own limit on one CEL expression
# The most a selector may cost, as `estimated_cost` counts it (a parse-tree node each, a
# macro's body once per element it may visit). Measured here, cel-python takes about 4 us a
# unit: 100,000 keeps one verdict under half a second, so a tenant's selector cannot hold the
# webhook or the scheduler (three macros nested over 60-element lists, 550 characters,
# estimated at 9.4 million, took 38 s). Ordinary selectors cost 30 to 60.
MAX_SELECTOR_COST = 100_000
_MACROS = {"all", "exists", "exists_one", "map", "filter"}
# how many elements a list the expression does not write out may have (a device's attributes
# and capacities: Kubernetes allows 32 per device)
_UNKNOWN_SIZE = 32
MAX_CACHED = 10_000  # compiled selectors kept (verdicts: ten times as many)


@dataclass(frozen=True)
class Device:
    """A device as a selector sees it: attribute and capacity values in the driver's domain.
    Quantities are whole numbers of their unit (bytes for memory)."""

    driver: str
    attributes: Mapping[str, str | int | bool]
    capacity: Mapping[str, int]

    @cached_property
    def key(self) -> str:
        """What tells one kind of device from another (caches of verdicts key on it)."""
        return json.dumps([self.driver, self.attributes, self.capacity], sort_keys=True)


def catalog_device(model: GpuModel) -> Device:
    """A whole GPU of `model` as NVIDIA's DRA driver publishes it. The product name is GPU
    Feature Discovery's label with its dashes turned back into spaces (the label is NVML's
    name with spaces as dashes; a name with dashes of its own differs in those)."""
    product = model.gfd_products[0] if model.gfd_products else f"NVIDIA-{model.id}"
    return Device(
        DRA_GPU_DRIVER,
        {
            "type": "gpu",
            "productName": product.replace("-", " "),
            "brand": "Nvidia",
            "architecture": model.architecture.capitalize(),
        },
        {"memory": model.memory_mib * MIB},
    )


def catalog_mig_device(model: GpuModel, profile: str) -> Device:
    """A MIG device of `profile` on a GPU of `model`, as NVIDIA's DRA driver publishes it:
    the parent's product attributes, its profile, and the instance's memory."""
    gpu = catalog_device(model)
    prof = next(p for p in (model.mig.profiles if model.mig else ()) if p.name == profile)
    return Device(
        DRA_GPU_DRIVER,
        {**gpu.attributes, "type": "mig", "profile": profile},
        {"memory": prof.memory_mib * MIB},
    )


def policy_devices(policy: Policy) -> dict[FlavorName, tuple[Device, ...]]:
    """DRA flavor -> its devices as the catalog describes them (`plan`, `simulate`)."""
    out: dict[FlavorName, tuple[Device, ...]] = {}
    for pool in policy.pools:
        for flavor in pool.flavors():
            if flavor.dra and flavor.profile is not None:
                out[flavor.name] = (catalog_mig_device(pool.model, flavor.profile),)
            elif flavor.dra:
                out[flavor.name] = (catalog_device(pool.model),)
    return out


def device_from_slice(driver: str, raw: Mapping[str, object]) -> Device | None:
    """A device of a ResourceSlice (`spec.devices[]`), without the attributes that name it;
    None if it is not a device a selector can read."""
    attrs: dict[str, str | int | bool] = {}
    for name, value in dict(raw.get("attributes") or {}).items():  # type: ignore[call-overload]
        short = str(name).removeprefix(f"{driver}/")
        # a qualified name of another domain is not the driver's attribute
        if "/" in short or short in IDENTITY or not isinstance(value, Mapping):
            continue
        for kind in ("string", "int", "bool", "version"):
            if kind in value:
                v = value[kind]
                attrs[short] = v if isinstance(v, (bool, int)) else str(v)
    caps: dict[str, int] = {}
    for name, value in dict(raw.get("capacity") or {}).items():  # type: ignore[call-overload]
        if isinstance(value, Mapping) and "value" in value:
            try:
                caps[str(name).removeprefix(f"{driver}/")] = math.ceil(
                    parse_quantity(str(value["value"]))
                )
            except QuantityError:
                continue
    return Device(driver, attrs, caps)


def _quantity(text: object) -> celtypes.IntType:
    try:
        return celtypes.IntType(math.ceil(parse_quantity(str(text))))
    except QuantityError as err:
        raise ValueError(f"quantity({text!r}): {err}") from None


def _compare(a: object, b: object) -> celtypes.IntType:
    x, y = int(a), int(b)  # type: ignore[call-overload]
    return celtypes.IntType((x > y) - (x < y))


_FUNCTIONS: dict[str, CELFunction] = {
    "quantity": _quantity,
    "compareTo": _compare,
    "isGreaterThan": lambda a, b: celtypes.BoolType(int(a) > int(b)),
    "isLessThan": lambda a, b: celtypes.BoolType(int(a) < int(b)),
    "asInteger": lambda a: celtypes.IntType(int(a)),
}


@dataclass
class Selectors:
    """Compiled selectors and their verdicts per device kind, each worked out once."""

    # built at the first selector compiled: building it (the CEL grammar) costs about a tenth of
    # a second, which every command that reads a policy paid while most policies name none
    _env: celpy.Environment | None = None
    _programs: dict[str, celpy.Runner | str] = field(default_factory=dict)
    _verdicts: dict[tuple[str, str], bool | str] = field(default_factory=dict)

    def program(self, expression: str) -> celpy.Runner | str:
        """The compiled expression, or why it does not compile."""
        hit = self._programs.get(expression)
        if hit is None:
            if len(expression) > MAX_SELECTOR_CHARS:
                hit = f"longer than {MAX_SELECTOR_CHARS} characters"
            else:
                hit = self._compile(expression)
            if len(self._programs) > MAX_CACHED:
                self._programs.clear()  # tenants write selectors: bounded
            self._programs[expression] = hit
        return hit

    def _compile(self, expression: str) -> celpy.Runner | str:
        if self._env is None:
            self._env = celpy.Environment()
        try:
            tree = self._env.compile(expression)
            cost = estimated_cost(tree)
            if cost > MAX_SELECTOR_COST:
                return (f"costs too much to judge: about {cost} operations, past the "
                        f"{MAX_SELECTOR_COST} a selector may take")  # fmt: skip
            return self._env.program(tree, functions=_FUNCTIONS)
        except CELParseError as err:
            where = getattr(err, "column", None)
            return "is not a CEL expression" + (
                f" (it breaks at character {where})" if where else ""
            )
        except RecursionError:
            return "is nested too deeply to compile"

    def verdict(self, expression: str, device: Device) -> bool | str:
        """Whether the device matches, or why the expression cannot say."""
        k = (expression, device.key)
        hit = self._verdicts.get(k)
        if hit is None:
            hit = self._judge(expression, device)
            if len(self._verdicts) > 10 * MAX_CACHED:
                self._verdicts.clear()
            self._verdicts[k] = hit
        return hit

    def _judge(self, expression: str, device: Device) -> bool | str:
        prog = self.program(expression)
        if isinstance(prog, str):
            return prog
        activation = {
            "device": json_to_cel(
                {
                    "driver": device.driver,
                    "attributes": {device.driver: dict(device.attributes)},
                    "capacity": {device.driver: dict(device.capacity)},
                }
            )
        }
        try:
            result = prog.evaluate(activation)
        except (CELEvalError, ValueError, TypeError) as err:
            return f"cannot be judged: {_first(err)}"
        except RecursionError:
            return "cannot be judged: nested too deeply"
        if isinstance(result, CELEvalError):
            return f"cannot be judged: {_first(result)}"
        if not isinstance(result, celtypes.BoolType):
            return f"gives {type(result).__name__}, not a boolean"
        return bool(result)


def estimated_cost(tree: Tree[Token]) -> int:
    """An upper bound on the operations evaluating a compiled CEL expression takes: one per
    node, a macro's body (all, exists, exists_one, map, filter) once per element its target
    may have. A list written out has its own length; any other (a variable, a field) the
    longest written out, or what a device's attributes may hold."""
    sizes = [_length(n) for kind in ("list_lit", "map_lit") for n in tree.find_data(kind)]
    unknown = max([_UNKNOWN_SIZE, *sizes])
    return _cost(tree, unknown)[0]


def _length(node: Tree[Token]) -> int:
    """The elements (or entries) a list or map literal writes out."""
    inner = node.children[0] if node.children else None
    return len(inner.children) if isinstance(inner, Tree) else 0


def _cost(node: Tree[Token] | Token, unknown: int) -> tuple[int, int]:
    """(operations, elements it may have) of one node."""
    if not isinstance(node, Tree):
        return 1, 1
    kids = [c for c in node.children if isinstance(c, Tree)]
    if node.data == "member_dot_arg" and len(node.children) == 3:
        target, name, args = node.children
        tc, ts = _cost(target, unknown)
        exprs = args.children if isinstance(args, Tree) else []
        if str(name) in _MACROS and len(exprs) >= 2:
            body = sum(_cost(e, unknown)[0] for e in exprs[1:])
            cost = tc + ts * (body + 1)
            return cost, ts if str(name) in ("map", "filter") else 1
    parts = [_cost(c, unknown) for c in kids]
    cost = 1 + sum(c for c, _ in parts)
    if node.data in ("list_lit", "map_lit"):
        return cost, _length(node)
    if node.data in ("ident", "member_dot", "member_index"):
        return cost, unknown
    if node.data == "addition":  # list + list
        return cost, sum(s for _, s in parts)
    return cost, max((s for _, s in parts), default=1)


def _first(err: BaseException) -> str:
    text = str(err.args[0]) if err.args else str(err)
    return text.splitlines()[0][:200]


@dataclass(frozen=True)
class Match:
    flavors: tuple[FlavorName, ...]  # the flavors whose devices every selector matches
    # per selector that matched no flavor: what it is and why
    unmatched: tuple[str, ...] = ()
    # matched flavors of which the selectors take only some devices: (flavor, matched, all)
    partial: tuple[tuple[FlavorName, int, int], ...] = ()


def match_flavors(
    selectors: Sequence[str],
    devices: Mapping[FlavorName, Iterable[Device]],
    judge: Selectors,
) -> Match:
    """The flavors with a device that all `selectors` match (any device when there are
    none). A selector no device of any flavor matches is named, with why."""
    matched: list[FlavorName] = []
    partial: list[tuple[FlavorName, int, int]] = []
    hits: dict[str, bool] = dict.fromkeys(selectors, False)
    errors: dict[str, str] = {}
    for flavor, flavor_devices in sorted(devices.items()):
        ok = seen = 0
        for device in flavor_devices:
            seen += 1
            verdicts = [judge.verdict(s, device) for s in selectors]
            for s, v in zip(selectors, verdicts, strict=True):
                if v is True:
                    hits[s] = True
                elif isinstance(v, str):
                    errors.setdefault(s, v)
            if all(v is True for v in verdicts):
                ok += 1
        if ok:
            matched.append(flavor)
        if 0 < ok < seen:
            partial.append((flavor, ok, seen))
    unmatched = tuple(
        f"{s!r} {errors.get(s, 'matches no device')}" for s in selectors if not hits[s]
    )
    return Match(tuple(matched), unmatched, tuple(partial))


def devices_key(devices: Mapping[FlavorName, Sequence[Device]]) -> str:
    """A fingerprint of each DRA flavor's devices, for caches of what selectors matched."""
    return json.dumps({f: sorted(d.key for d in ds) for f, ds in sorted(devices.items())})
