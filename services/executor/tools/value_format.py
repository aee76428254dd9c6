"""How metric values are spelled in evidence text: the value together with its unit."""

from __future__ import annotations

_BINARY_UNITS = (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024))


def _number(value: float, max_decimals: int, min_decimals: int = 0) -> str:
    """Rounded to `max_decimals`, trailing zeros dropped down to `min_decimals`."""
    text = f"{value:.{max_decimals}f}"
    if max_decimals > min_decimals and "." in text:
        whole, frac = text.split(".")
        frac = frac.rstrip("0")
        frac = frac + "0" * (min_decimals - len(frac)) if len(frac) < min_decimals else frac
        text = f"{whole}.{frac}" if frac else whole
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
