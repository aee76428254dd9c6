"""Excerpt support: does a binding's `evidence_excerpt` occur in the system-side evidence text?

Graph spec, "Mismatched excerpt is rejected". Both sides are normalised
the same way, then every `...`-separated fragment of the excerpt must occur in the text, in order.
One matcher for the whole system: the gatekeeper judges excerpts with it, and the
executor chooses and checks its own excerpts with it before its output leaves the service.

What normalisation forgives: Unicode compatibility forms (NFKC, so full-width letters, digits,
spaces and `％，：（）` become ASCII), case, runs of whitespace, the Chinese punctuation NFKC leaves
alone (`。、“”‘’【】《》—` …), invisible format characters (zero-width spaces), and whitespace
next to CJK characters or separating punctuation (Chinese text is spaced arbitrarily).

What it never forgives: a different letter (a Cyrillic look-alike stays Cyrillic) and any change
to a number. A digit run at either end of a fragment must sit on a number boundary in the text, so
`92%` matches neither `192%` nor `0.92%`, `5%` does not match `-5%`, and `92` does not match inside
`92.5`; a changed digit simply does not occur.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

# Punctuation NFKC does not fold to ASCII (NFKC already handles the full-width ASCII block,
# U+3000 and `…` -> `...`).
_PUNCT_TABLE: dict[str, str] = {
    "。": ".", "｡": ".", "、": ",", "､": ",", "·": ".", "・": ".",
    "“": '"', "”": '"', "„": '"', "‟": '"', "「": '"', "」": '"', "『": '"', "』": '"',
    "‘": "'", "’": "'", "‚": "'", "‛": "'",
    "【": "[", "】": "]", "〔": "(", "〕": ")", "〈": "<", "〉": ">", "《": "<", "》": ">",
    "—": "-", "–": "-", "‐": "-", "‑": "-", "‒": "-", "―": "-", "−": "-", "〜": "~",
    "⋯": "...",
}
# A regex over the few mapped characters: far cheaper than str.translate on long texts.
_PUNCT_CLASS = re.escape("".join(_PUNCT_TABLE))
_PUNCT = re.compile(f"[{_PUNCT_CLASS}]")
_FORMAT_CLASS = r"\u00ad\u200b-\u200f\u2028-\u202e\u2060-\u2064\ufeff"
_FORMAT_CHARS = re.compile(f"[{_FORMAT_CLASS}]")
# One scan that tells whether either substitution has anything to do (most texts have neither).
_FORMAT_OR_PUNCT = re.compile(f"[{_FORMAT_CLASS}{_PUNCT_CLASS}]")
_CJK = r"\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff"
# Most Chinese log lines: ASCII and CJK unified ideographs only.
_ASCII_AND_IDEOGRAPHS = re.compile(r"[\x00-\x7f\u4e00-\u9fff]*")
_SEPARATORS = r",;:!?()\[\]<>\"'"
# Whitespace is dropped where it carries no meaning: beside a CJK character or after/before
# separating punctuation. It is kept between two ASCII words or two numbers. Spaces are single
# when this runs, so one pass decides each space by its two (non-space) neighbours.
_DROPPABLE_SPACE = re.compile(rf" (?:(?<=[{_CJK}{_SEPARATORS}] )|(?=[{_CJK}{_SEPARATORS}]))")
_ELLIPSIS = re.compile(r"\.{3,}")


def _map_punct(match: re.Match[str]) -> str:
    return _PUNCT_TABLE[match.group()]


def normalize_for_match(text: str) -> str:
    """The normal form both excerpt and evidence text are compared in."""
    if text.isascii() or _ASCII_AND_IDEOGRAPHS.fullmatch(text):
        # NFKC, format characters and the punctuation table are all outside ASCII and the CJK
        # unified ideographs; ideographs have no case, so casefold is lower(), and the text stays NFKC.
        text = text.lower()
    else:
        text = unicodedata.normalize("NFKC", text)
        if _FORMAT_OR_PUNCT.search(text) is None:
            # Nothing to remove or map: the text is NFKC, so when casefold changes nothing either
            # the second NFKC would change nothing.
            folded = text.casefold()
            text = folded if folded == text else unicodedata.normalize("NFKC", folded)
        else:
            text = _FORMAT_CHARS.sub("", text)
            text = _PUNCT.sub(_map_punct, text).casefold()
            # casefold and the removals can leave non-NFKC sequences (a mark that now follows its base)
            text = unicodedata.normalize("NFKC", text)
    # Every whitespace character but the space is unprintable, so a printable text without double,
    # leading or trailing spaces is already what the split and join below would make of it.
    if not text.isprintable() or "  " in text or text[:1] == " " or text[-1:] == " ":
        text = " ".join(text.split())  # the same whitespace as `\s`: runs collapsed, ends stripped
    return _DROPPABLE_SPACE.sub("", text)


def excerpt_fragments(excerpt: str) -> list[str]:
    """The normalised, non-empty fragments of an excerpt split at `...` / `…`."""
    normal = normalize_for_match(excerpt)
    return [frag.strip() for frag in _ELLIPSIS.split(normal) if frag.strip()]


def excerpt_length(excerpt: str) -> int:
    """Characters of substance: normalised fragments without spaces (used by excerpt_too_short)."""
    return sum(len(frag.replace(" ", "")) for frag in excerpt_fragments(excerpt))


def _is_digit(ch: str) -> bool:
    return "0" <= ch <= "9"


def _number_boundary_ok(text: str, start: int, end: int, fragment: str) -> bool:
    """A fragment that starts/ends with a digit must not continue a number in the text."""
    if _is_digit(fragment[0]) and start > 0:
        before = text[start - 1]
        if _is_digit(before):
            return False
        if before in ".," and start > 1 and _is_digit(text[start - 2]):
            return False  # `5%` inside `0.5%` / `1,5`
        if before in "+-" and (start == 1 or not text[start - 2].isalnum()):
            return False  # a sign, not a hyphen inside an identifier such as pod-3
    if _is_digit(fragment[-1]) and end < len(text):
        after = text[end]
        if _is_digit(after):
            return False
        if after in ".," and end + 1 < len(text) and _is_digit(text[end + 1]):
            return False  # `92` inside `92.5`
    # a fragment that begins or ends on a decimal separator must not split a number either
    if fragment[0] in ".," and len(fragment) > 1 and _is_digit(fragment[1]) and start > 0 and _is_digit(text[start - 1]):
        return False  # `.5%` inside `92.5%`
    if fragment[-1] in ".," and len(fragment) > 1 and _is_digit(fragment[-2]) and end < len(text) and _is_digit(text[end]):
        return False  # `92.` inside `92.5`
    return True


def _find(text: str, fragment: str, start: int) -> int:
    """First occurrence of fragment at or after start that respects number boundaries, or -1."""
    pos = text.find(fragment, start)
    while pos != -1:
        if _number_boundary_ok(text, pos, pos + len(fragment), fragment):
            return pos
        pos = text.find(fragment, pos + 1)
    return -1


@dataclass(frozen=True)
class ExcerptMatch:
    supported: bool
    # span in the *normalised* text from the first fragment's start to the last fragment's end
    start: int = -1
    end: int = -1


def _match_span(fragments: list[str], normal_text: str) -> tuple[int, int] | None:
    """Greedy in-order search; the earliest valid occurrence of each fragment is optimal."""
    if not fragments:
        return None
    cursor = 0
    first = -1
    for fragment in fragments:
        pos = _find(normal_text, fragment, cursor)
        if pos == -1:
            return None
        if first == -1:
            first = pos
        cursor = pos + len(fragment)
    return first, cursor


def match_normalized(fragments: list[str], normal_text: str) -> ExcerptMatch:
    """Where the fragments occur, in order, in the normalised text (see `_match_span`)."""
    span = _match_span(fragments, normal_text)
    return ExcerptMatch(False) if span is None else ExcerptMatch(True, *span)


def fragments_supported(fragments: list[str], normal_text: str) -> bool:
    """`match_normalized(...).supported`, without building the match."""
    return _match_span(fragments, normal_text) is not None


def excerpt_supported(excerpt: str, text: str) -> bool:
    """True when the excerpt (or each of its `...` fragments, in order) occurs in text."""
    return match_normalized(excerpt_fragments(excerpt), normalize_for_match(text)).supported


def bounded_window(text: str, excerpt: str, max_chars: int) -> str:
    """`text` itself when short enough, else a window of at most max_chars containing the excerpt.

    Windows of max_chars overlapping by half are tried in order; the first one whose own
    normal form contains the whole match away from its cut edges is returned (an edge could cut a
    number in two). Any match shorter than half a window lies inside some window. If none
    qualifies (a very long excerpt), the text's beginning is returned.
    """
    if len(text) <= max_chars:
        return text
    fragments = excerpt_fragments(excerpt)
    step = max(1, max_chars // 2)
    for begin in range(0, len(text), step):
        window = text[begin : begin + max_chars]
        normal = normalize_for_match(window)
        found = match_normalized(fragments, normal)
        at_start = begin == 0
        at_end = begin + max_chars >= len(text)
        if found.supported and (at_start or found.start > 0) and (at_end or found.end < len(normal)):
            return window
        if at_end:
            break
    return text[:max_chars]
