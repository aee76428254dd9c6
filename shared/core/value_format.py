"""How metric values are spelled in evidence text: the value together with its unit."""

from __future__ import annotations

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


def format_value(value: float, unit: str) -> str:
    """`92.4%`, `850ms`, `1.73GiB`, `12.5/s`, `48` … — the one spelling every ref text uses."""
    unit = (unit or "").lower()
    if unit == "percent":
        return f"{_number(value, 2, 1)}%"
    if unit in ("ms", "milliseconds"):
        return f"{_number(value, 1)}ms"
    if unit in ("s", "seconds"):
        return f"{_number(value, 3)}s"
    if unit == "bytes":
        for suffix, size in _BINARY_UNITS:
            if abs(value) >= size:
                return f"{_number(value / size, 2)}{suffix}"
        return f"{_number(value, 0)}B"
    if unit in ("per_second", "rps", "ops"):
        return f"{_number(value, 2)}/s"
    text = _number(value, 2)
    if unit in ("", "count", "1", "none"):
        return text
    return f"{text} {unit}"
