"""Kubernetes resource quantities as integers (milli-CPU, MiB, whole counts).

Only the forms that appear in pod specs are accepted: plain and decimal numbers, the `m`
suffix, decimal (k, M, G, T, P, E) and binary (Ki, Mi, Gi, Ti, Pi, Ei) suffixes. No floats are
involved: "0.5" CPU is parsed as 500 milli exactly.
"""

from __future__ import annotations

import re
from fractions import Fraction

_QUANTITY = re.compile(r"^([+-]?)(\d+(?:\.\d*)?|\.\d+)([a-zA-Z]*)$")
_SUFFIX: dict[str, Fraction] = {
    "": Fraction(1),
    "m": Fraction(1, 1000),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}


class QuantityError(ValueError):
    pass


def parse_quantity(value: str | int) -> Fraction:
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, int):
        return Fraction(value)
    m = _QUANTITY.match(value.strip())
    if not m or m.group(3) not in _SUFFIX:
        raise QuantityError(f"{value!r} is not a Kubernetes quantity (e.g. 2, 500m, 16Gi, 1.5)")
    sign = -1 if m.group(1) == "-" else 1
    return sign * Fraction(m.group(2)) * _SUFFIX[m.group(3)]


def cpu_milli(value: str | int) -> int:
    q = parse_quantity(value) * 1000
    if q < 0:
        raise QuantityError(f"CPU {value!r} is negative")
    # Kubernetes rounds CPU up to the milli-core.
    return int(-(-q.numerator // q.denominator))


def memory_mib(value: str | int) -> int:
    q = parse_quantity(value) / 2**20
    if q < 0:
        raise QuantityError(f"memory {value!r} is negative")
    return int(-(-q.numerator // q.denominator))


def whole_count(value: str | int) -> int:
    """Extended resources (nvidia.com/*) accept only whole numbers."""
    q = parse_quantity(value)
    if q.denominator != 1:
        raise QuantityError(f"{value!r} is not a whole number (extended resources cannot be split)")
    if q < 0:
        raise QuantityError(f"{value!r} is negative")
    return int(q)
