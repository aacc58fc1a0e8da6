"""Kubernetes resource quantities as integers (milli-CPU, MiB, whole counts).

Only the forms that appear in pod specs are accepted: plain and decimal numbers, the `m`
suffix, decimal (k, M, G, T, P, E) and binary (Ki, Mi, Gi, Ti, Pi, Ei) suffixes. No floats are
involved: "0.5" CPU is parsed as 500 milli exactly.
"""

from __future__ import annotations

import re
from fractions import Fraction

# ASCII digits only: `\d` would also match "²" or "１", which int() and Fraction() refuse.
_QUANTITY = re.compile(r"^([+-]?)([0-9]+(?:\.[0-9]*)?|\.[0-9]+)([a-zA-Z]*)$")
_WHOLE = re.compile(r"^[0-9]+$")
MAX_QUANTITY_CHARS = 40
# Far above any node or pod, far below where integer arithmetic or int64 fields would overflow.
MAX_CPU_MILLI = 10**9  # a million cores
MAX_MEMORY_MIB = 2**40  # an exbibyte
MAX_COUNT = 10**6
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
    if not isinstance(value, str) or len(value) > MAX_QUANTITY_CHARS:
        raise QuantityError(f"{str(value)[:MAX_QUANTITY_CHARS]!r}… is not a Kubernetes quantity")
    m = _QUANTITY.match(value.strip())
    if not m or m.group(3) not in _SUFFIX:
        raise QuantityError(f"{value!r} is not a Kubernetes quantity (e.g. 2, 500m, 16Gi, 1.5)")
    sign = -1 if m.group(1) == "-" else 1
    return sign * Fraction(m.group(2)) * _SUFFIX[m.group(3)]


def cpu_milli(value: str | int) -> int:
    q = parse_quantity(value) * 1000
    if q < 0:
        raise QuantityError(f"CPU {value!r} is negative")
    if q > MAX_CPU_MILLI:
        raise QuantityError(f"CPU {value!r} is more than {MAX_CPU_MILLI // 1000:,} cores")
    # Kubernetes rounds CPU up to the milli-core.
    return int(-(-q.numerator // q.denominator))


def memory_mib(value: str | int) -> int:
    q = parse_quantity(value) / 2**20
    if q < 0:
        raise QuantityError(f"memory {value!r} is negative")
    if q > MAX_MEMORY_MIB:
        raise QuantityError(f"memory {value!r} is more than 1 EiB")
    return int(-(-q.numerator // q.denominator))


def whole_count(value: str | int) -> int:
    """Extended resources (nvidia.com/*) accept only whole numbers."""
    q = parse_quantity(value)
    if q.denominator != 1:
        raise QuantityError(f"{value!r} is not a whole number (extended resources cannot be split)")
    if q < 0:
        raise QuantityError(f"{value!r} is negative")
    if q > MAX_COUNT:
        raise QuantityError(f"{value!r} is more than {MAX_COUNT:,}")
    return int(q)


def whole_number(text: str, what: str, maximum: int) -> int:
    """A whole number ≥ 0 written in ASCII digits, at most `maximum` (a CSV cell, an
    annotation). The message names `what` and never leaks Python's own wording."""
    value = text.strip()
    if not _WHOLE.match(value):
        shown = value if len(value) <= MAX_QUANTITY_CHARS else value[:MAX_QUANTITY_CHARS] + "…"
        raise QuantityError(f"{what} is {shown!r}, not a whole number ≥ 0 (digits 0-9)")
    digits = value.lstrip("0") or "0"
    if len(digits) > len(str(maximum)) or int(digits) > maximum:
        raise QuantityError(f"{what} is {digits[:24]}, more than {maximum:,}")
    return int(digits)
