"""A metric citation's series drawn as a terminal sparkline (issue 22, point 2): `attest ask`
prints it beside the fact that cites the series (`▁▂▃▄▅▆▇█`, lowest to highest of the window)."""

from __future__ import annotations

from collections.abc import Sequence

from attest.gateway.v1 import answer_pb2

BARS = "▁▂▃▄▅▆▇█"
MAX_WIDTH = 24


def sparkline(values: Sequence[float], width: int = MAX_WIDTH) -> str:
    """One bar per value (a longer series is averaged into `width` buckets); a flat series is a row
    of the lowest bar. Empty for no values."""
    if not values:
        return ""
    if len(values) > width:
        buckets = [values[len(values) * k // width: len(values) * (k + 1) // width] for k in range(width)]
        values = [sum(bucket) / len(bucket) for bucket in buckets]
    low, high = min(values), max(values)
    if high <= low:
        return BARS[0] * len(values)
    return "".join(BARS[min(len(BARS) - 1, int((v - low) / (high - low) * len(BARS)))] for v in values)


def item_spark(item: answer_pb2.AnswerItem) -> str:
    """The sparkline of the item's first metric citation that carries a series, with its metric."""
    for citation in item.citations:
        if citation.HasField("series") and citation.series.points:
            line = sparkline([point.value for point in citation.series.points])
            return f"{line} {citation.series.metric}".rstrip()
    return ""


def answer_lines(answer: answer_pb2.StructuredAnswer) -> list[str]:
    """The answer's text laid out as `structured_answer.render` lays it out, each fact with a
    metric citation followed by its sparkline."""
    head: list[str] = []
    out: list[str] = []
    for section in answer.sections:
        if not section.items:
            continue
        if section.kind == answer_pb2.SECTION_KIND_CONFIDENCE:
            head += [item.text for item in section.items]
            continue
        out += ["", f"【{section.title}】"]
        for item in section.items:
            spark = item_spark(item)
            text = item.text if section.plain else f"- {item.text}"
            out.append(f"{text}  {spark}" if spark else text)
    lines = head + out
    while lines and not lines[0]:
        lines.pop(0)
    return lines
