"""Turn pydantic's validation errors into gpucarve `Problem`s a person can act on.

pydantic reports `('pools', 1, 'gpusPerNode')` and "Input should be a valid integer"; users get
`pools[1].gpusPerNode: expected a whole number, got 'eight'` and a fix, and for an unknown key
the keys that are allowed there, with the closest one first.
"""

from __future__ import annotations

import difflib
import types
import typing
from typing import Any

from pydantic import BaseModel, ValidationError

from gpucarve.core.problems import Path, Problem


def short_repr(value: Any, limit: int = 60) -> str:
    r = repr(value)
    return r if len(r) <= limit else r[: limit - 1] + "…"


_TYPE_NAMES = {
    "int_type": "a whole number",
    "int_parsing": "a whole number",
    "int_from_float": "a whole number",
    "float_type": "a number",
    "float_parsing": "a number",
    "string_type": "a string",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "dict_type": "a mapping (key: value)",
    "model_type": "a mapping (key: value)",
    "model_attributes_type": "a mapping (key: value)",
    "list_type": "a list",
    "tuple_type": "a list",
}


# Patterns users meet often, said in words (pattern -> what it is, the fix).
_PATTERN_NAMES = {
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$": (
        "a DNS label",
        "use lowercase letters, digits and '-', starting and ending with a letter or digit "
        "(Kubernetes names namespaces and queues so)",
    ),
    r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$": (
        "a DNS subdomain name",
        "use lowercase letters, digits, '-' and '.', starting and ending with a letter or digit",
    ),
    r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$": (
        "a label value",
        "use letters, digits, '-', '_' and '.', starting and ending with a letter or digit",
    ),
}


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "nothing (null)"
    return short_repr(value)


def _unwrap(tp: Any) -> Any:
    """Strip Optional/Annotated so the model class behind a field can be found."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(tp)[0])
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _unwrap(args[0]) if len(args) == 1 else tp
    return tp


def model_at(root: type[BaseModel], path: Path) -> type[BaseModel] | None:
    """The pydantic model that validates the mapping at `path`, if there is one."""
    tp: Any = root
    for part in path:
        tp = _unwrap(tp)
        if isinstance(part, int):
            args = typing.get_args(tp)
            if typing.get_origin(tp) is not list or not args:
                return None
            tp = args[0]
            continue
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            field = _field_by_alias(tp, part)
            if field is None:
                return None
            tp = field
        elif typing.get_origin(tp) is dict:
            tp = typing.get_args(tp)[1]
        else:
            return None
    tp = _unwrap(tp)
    return tp if isinstance(tp, type) and issubclass(tp, BaseModel) else None


def _field_by_alias(model: type[BaseModel], key: str) -> Any:
    for name, info in model.model_fields.items():
        if (info.alias or name) == key:
            return info.annotation
    return None


def allowed_keys(model: type[BaseModel]) -> list[str]:
    return [info.alias or name for name, info in model.model_fields.items()]


def problems_from(exc: ValidationError, root: type[BaseModel], prefix: Path = ()) -> list[Problem]:
    out: list[Problem] = []
    errs = exc.errors(include_url=False)
    missing = {(*prefix, *err["loc"]) for err in errs if err["type"] == "missing"}
    renamed = {
        (*prefix, *err["loc"][:-1], close[0])
        for err in errs
        if err["type"] == "extra_forbidden"
        and (model := model_at(root, tuple(err["loc"][:-1]))) is not None
        and (close := difflib.get_close_matches(str(err["loc"][-1]), allowed_keys(model), 1, 0.6))
    }
    for err in errs:
        loc: Path = tuple(p for p in err["loc"] if p != "[key]")
        path = (*prefix, *loc)
        typ = err["type"]
        value = err.get("input")
        ctx = err.get("ctx") or {}
        if typ == "missing" and path in renamed:
            continue  # reported with the misspelt key that was meant to be this one
        if typ == "missing":
            field = loc[-1] if loc else "?"
            out.append(
                Problem(
                    path,
                    "missing-field",
                    f"required key {field!r} is missing",
                    f"add `{field}:` here (`gpucarve policy schema` documents every key)",
                )
            )
        elif typ == "extra_forbidden":
            key = str(loc[-1]) if loc else "?"
            model = model_at(root, loc[:-1])
            keys = allowed_keys(model) if model else []
            close = difflib.get_close_matches(key, keys, n=1, cutoff=0.6)
            fix = f"did you mean {close[0]!r}?" if close else "remove it"
            if close and (*path[:-1], close[0]) in missing:
                fix = f"rename it to {close[0]!r}, a required key that is missing."
            if keys:
                fix += f" Allowed keys here: {', '.join(keys)}"
            out.append(Problem(path, "unknown-key", f"unknown key {key!r}", fix))
        elif typ in _TYPE_NAMES:
            want = _TYPE_NAMES[typ]
            out.append(
                Problem(
                    path,
                    "wrong-type",
                    f"expected {want}, got {_kind(value)}",
                    f"write {want} here",
                )
            )
        elif typ == "literal_error":
            expected = ctx.get("expected", "")
            out.append(
                Problem(
                    path,
                    "bad-value",
                    f"{_kind(value)} is not allowed here",
                    f"use {expected}",
                )
            )
        elif typ in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
            sym = {
                "greater_than_equal": "≥",
                "greater_than": ">",
                "less_than_equal": "≤",
                "less_than": "<",
            }[typ]
            bound = next(iter(ctx.values()), "?")
            out.append(
                Problem(
                    path,
                    "out-of-range",
                    f"must be {sym} {bound}, got {_kind(value)}",
                    f"use a value {sym} {bound}",
                )
            )
        elif typ in ("too_short", "too_long"):
            out.append(
                Problem(
                    path,
                    "bad-length",
                    err["msg"].replace("List", "the list").replace("Value", "the value"),
                    "add or remove entries",
                )
            )
        elif typ == "string_pattern_mismatch":
            pattern = str(ctx.get("pattern", ""))
            what = _PATTERN_NAMES.get(pattern)
            out.append(
                Problem(
                    path,
                    "bad-format",
                    f"{_kind(value)} is not {what[0]}"
                    if what
                    else f"{_kind(value)} does not have the expected format",
                    what[1] if what else f"match the pattern {pattern}",
                )
            )
        elif typ == "finite_number":
            out.append(
                Problem(
                    path,
                    "not-finite",
                    f"must be a finite number, got {_kind(value)}",
                    "write a number such as 1 or 2.5 (not .nan or .inf)",
                )
            )
        elif typ == "value_error":
            error = ctx.get("error")
            text = str(error) if error else err["msg"]
            message, _, fix = text.partition(" | fix: ")
            out.append(Problem(path, "bad-value", message, fix or "correct the value"))
        else:
            out.append(Problem(path, "invalid", f"{err['msg']} (got {_kind(value)})", "correct it"))
    return out
