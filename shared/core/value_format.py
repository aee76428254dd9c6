"""How metric values are spelled in evidence text: the value together with its unit."""

from __future__ import annotations

import math

_BINARY_UNITS = (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024))
_FIXED_SPECS = {decimals: f".{decimals}f" for decimals in range(4)}  # the decimals format_value asks for


def _number(value: float, max_decimals: int, min_decimals: int = 0) -> str:
    """Rounded to `max_decimals`, trailing zeros dropped down to `min_decimals`."""
    text = format(value, _FIXED_SPECS.get(max_decimals) or f".{max_decimals}f")
    # Only a fraction that ends in 0 has zeros to drop; nan and inf have no fraction at all.
    if max_decimals > min_decimals and text[-1] == "0" and "." in text:
        stripped = text.rstrip("0")  # stops at the point at the latest
        if min_decimals > 0:
            text = text[:max(len(stripped), text.index(".") + 1 + min_decimals)]
        else:
            text = stripped[:-1] if stripped[-1] == "." else stripped
    return "0" if text in ("-0", "-0.0") else text


# tool unit (lower case) -> (the most decimals written, the fewest kept, the suffix); bytes are scaled
_SPELLING = {
    "percent": (2, 1, "%"), "ms": (1, 0, "ms"), "milliseconds": (1, 0, "ms"), "s": (3, 0, "s"),
    "seconds": (3, 0, "s"), "per_second": (2, 0, "/s"), "rps": (2, 0, "/s"), "ops": (2, 0, "/s"),
}


def as_written(value: float, unit: str, factor: float = 1.0) -> tuple[float, int]:
    """`value` in `unit` as `format_value` writes it, scaled by `factor` (a power of ten: a ratio's
    0.45 is 45 %), and the decimal places that leaves: a statement says a value no more precisely,
    and rounded no differently, than the evidence text does. A factor that is no power of ten (bytes
    to MB) scales the value itself, to two places."""
    most, fewest, _ = _SPELLING.get((unit or "").lower(), (2, 0, ""))
    text = _number(value, most, fewest)
    places = len(text) - text.index(".") - 1 if "." in text else 0
    if factor == 1.0:
        return value, places
    shift = round(math.log10(factor)) if factor > 0 else 0
    if not math.isclose(10.0 ** shift, factor):
        return float(f"{value * factor:.12g}"), 2
    return float(f"{float(text) * factor:.12g}"), max(0, places - shift)


def format_value(value: float, unit: str) -> str:
    """`92.4%`, `850ms`, `1.73GiB`, `12.5/s`, `48` … — the one spelling every ref text uses."""
    unit = (unit or "").lower()
    if unit in _SPELLING:
        most, fewest, suffix = _SPELLING[unit]
        return f"{_number(value, most, fewest)}{suffix}"
    if unit == "bytes":
        for suffix, size in _BINARY_UNITS:
            if abs(value) >= size:
                return f"{_number(value / size, 2)}{suffix}"
        return f"{_number(value, 0)}B"
    text = _number(value, 2)
    if unit in ("", "count", "1", "none"):
        return text
    return f"{text} {unit}"
