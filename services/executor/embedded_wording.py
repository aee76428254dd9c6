"""How the embedded executor agent's sentences quote and bound what they cite: a log excerpt
holding a token, a change summary or a quote cut at a separator and never through a name, a token
spelled as its text spells it, and the moved metrics of an anomaly (「a、b 升高」).
"""

from __future__ import annotations

import re

from services.executor.embedded_findings import Candidate
from services.executor.excerpt_choice import is_supported

MAX_LOG_EXCERPT = 160
MAX_SUMMARY_IN_CAUSE = 60


def moved_metrics(anomalies: list[Candidate]) -> str:
    """「a、b 升高」, or 「a 升高、b 下降」 when they moved different ways."""
    ways = {c.moved for c in anomalies}
    if len(ways) == 1:
        return f"{'、'.join(c.metric for c in anomalies)} {ways.pop()}"
    return "、".join(f"{c.metric} {c.moved}" for c in anomalies)


def bounded_summary(summary: str) -> str:
    """The change summary, cut at a separator when long (a cut never halves a token)."""
    text = summary.strip().rstrip("。")
    if len(text) <= MAX_SUMMARY_IN_CAUSE:
        return text
    return _cut(text, MAX_SUMMARY_IN_CAUSE, ("，", "；", "、", ",", ";", " ")).rstrip("，；、,; ") + "…"


def spelled(token: str, text: str) -> str:
    """The token as `text` spells it (tokens are compared lower-cased)."""
    at = text.lower().find(token)
    return text[at: at + len(token)] if at >= 0 else token


def quote_around(text: str, token: str | None, limit: int) -> str:
    """`text` bounded to `limit` characters, keeping `token` in view when it is given."""
    if len(text) <= limit:
        return text
    at = text.lower().find(token.lower()) if token else -1
    word_end = text.find(" ", at) if at >= 0 else -1
    word_end = len(text) if word_end < 0 else word_end
    if at < 0 or word_end <= limit - 1:
        return short(text, limit)
    start = max(0, at - limit // 3)
    space = text.find(" ", start, at)
    start = space + 1 if space >= 0 else start
    piece = text[start:]
    return "…" + (piece if len(piece) <= limit else short(piece, limit))


def excerpt_with(text: str, token: str) -> str | None:
    """A verbatim piece of `text` (at most MAX_LOG_EXCERPT characters, cut at spaces) that holds
    `token` and that the gatekeeper's matcher accepts; None when there is none."""
    at = text.lower().find(token.lower())
    if at < 0:
        return None
    if len(text) <= MAX_LOG_EXCERPT:
        return text if is_supported(text, text) else None
    lo = max(0, at - (MAX_LOG_EXCERPT - len(token)) // 2)
    hi = min(len(text), lo + MAX_LOG_EXCERPT)
    if lo > 0:
        space = text.find(" ", lo, at)
        lo = space + 1 if space >= 0 else lo
    if hi < len(text):
        space = text.rfind(" ", at + len(token), hi)
        hi = space if space >= 0 else hi
    piece = text[lo:hi].strip()
    return piece if token.lower() in piece.lower() and is_supported(piece, text) else None


def short(text: str, limit: int = 80) -> str:
    if len(text) <= limit:
        return text
    return _cut(text, limit, (" ",)) + "…"


_NAME_CHAR = re.compile(r"[A-Za-z0-9_.\-]")
MAX_NAME_OVERRUN = 40  # how far a cut may run past its limit to keep a name whole


def _cut(text: str, limit: int, marks: tuple[str, ...]) -> str:
    """The head of `text` for a bound of `limit` characters: through the end of a name the limit
    falls inside (when it ends within MAX_NAME_OVERRUN), else up to the last of `marks` before the
    limit (when past half of it), else up to the limit moved on to the end of its name. Never a
    halved name (`max_retrie`): it would read as a name the evidence lacks."""
    start = end = limit
    while 0 < end < len(text) and _NAME_CHAR.match(text[end - 1]) and _NAME_CHAR.match(text[end]):
        end += 1
    while 0 < start < len(text) and _NAME_CHAR.match(text[start - 1]) and _NAME_CHAR.match(text[start]):
        start -= 1
    named = any(ch.isalpha() for ch in text[start:end])  # a number or an address is no name to keep
    if named and end > limit and end - limit <= MAX_NAME_OVERRUN:
        return text[:end]  # a name that starts inside the limit is kept whole (a migration's V45__drop_idx_…)
    cut = max(text.rfind(mark, 0, limit) for mark in marks)
    if cut > limit // 2:
        return text[:cut]
    return text[:end] if named else text[:start]
