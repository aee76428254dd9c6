"""Templates of log messages and other evidence texts: the one templating mechanism, on drain3.

A text's *mask* replaces what varies between occurrences of one message with a placeholder,
through drain3's masking instructions applied in order (as its `LogMasker` does): UUIDs, hex ids
(digits and a-f letters mixed, six or more), identifiers mixing letters and digits (order ids, pod
suffixes), numbers. Every instruction treats the ten ASCII digits alike, so texts that differ only
in them share a mask (`digit_key`), and whitespace runs become one space.

A *set's templates* go one step further: the set's distinct masks are clustered by drain3's Drain
(a prefix tree over a message's length and first tokens, then a token similarity threshold), so
that lines differing in a word that is a parameter (a user, a table, a path) share one template
with `<*>` in that place. The masks are fed in sorted order, so a set's templates do not depend
on the order of its texts.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from functools import lru_cache

from drain3.drain import Drain
from drain3.masking import MaskingInstruction

from shared.text_scan import per_text_cache

MASK_PREFIX, MASK_SUFFIX = "<", ">"
WILDCARD = "<*>"
# drain3's defaults: a tree of depth 4 (token count, first token, clusters), 40 % equal tokens.
DRAIN_DEPTH = 4
DRAIN_SIMILARITY = 0.4
DRAIN_MAX_CHILDREN = 100

_UUID = r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"
# Hex ids mix digits and a-f letters; a run of digits alone is a number (lag=98765 and
# lag=123456 are one template).
_HEX = r"\b(?=[0-9a-fA-F]*\d)(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{6,}\b"
# Words mixing letters and digits (order ids, pod suffixes, SKU codes) are identifiers.
_MIXED_ID = r"\b(?=[A-Za-z]*\d)(?=\d*[A-Za-z])[A-Za-z0-9]{4,}\b"
_NUMBER = r"\d+(?:\.\d+)?"
# Cheap necessary conditions, so that an instruction runs only on a text it can change: a UUID
# holds `-hhhh-hhhh-` (its inner groups), a hex id a run of six hex characters, and hex ids,
# mixed ids and numbers all hold a digit.
_UUID_INNER = re.compile(r"-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-")
_HEX_RUN = re.compile(r"[0-9a-fA-F]{6}")
_DIGIT = re.compile(r"\d")


def _may_hold_uuid(text: str) -> bool:
    return text.count("-") >= 4 and _UUID_INNER.search(text) is not None


def _may_hold_hex(text: str) -> bool:
    return _DIGIT.search(text) is not None and _HEX_RUN.search(text) is not None


def _may_hold_digit(text: str) -> bool:
    return _DIGIT.search(text) is not None


# drain3's masking instructions, in the order they apply, each with its necessary condition.
MASKING: tuple[tuple[MaskingInstruction, Callable[[str], bool]], ...] = (
    (MaskingInstruction(_UUID, "UUID"), _may_hold_uuid),
    (MaskingInstruction(_HEX, "HEX"), _may_hold_hex),
    (MaskingInstruction(_MIXED_ID, "ID"), _may_hold_digit),
    (MaskingInstruction(_NUMBER, "N"), _may_hold_digit),
)
_ASCII_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
# A run reads its lines several times (clusters for the answer, a runbook follow-up, the causal
# check's corpus) and runs over one window read the same lines: each text is masked once, and a
# set of masks is clustered once. Longer texts are not kept.
_CACHED_MASKS = 8192
_MAX_CACHED_CHARS = 2000
_CACHED_SETS = 64


@per_text_cache(_CACHED_MASKS, _MAX_CACHED_CHARS)
def mask(text: str) -> str:
    """`text` with its UUIDs, hex ids, mixed ids and numbers masked, whitespace runs as one space."""
    for instruction, may_change in MASKING:
        if may_change(text):
            text = instruction.mask(text, MASK_PREFIX, MASK_SUFFIX)
    return " ".join(text.split())  # splits on the whitespace `\s` matches: runs become one space


def digit_key(text: str) -> bytes:
    """Texts with equal keys have equal masks, so a batch masks each key once.

    Every instruction treats the ten ASCII digits alike (no pattern names a single digit) and the
    number instruction masks every digit, so the mask does not depend on which ASCII digits a text
    holds: the key is the text with each of them spelled 0 (UTF-8, where no other character's
    bytes are ASCII; `surrogatepass` so that any `str` has a key)."""
    return text.encode("utf-8", "surrogatepass").translate(_ASCII_DIGITS_AS_ZERO)


def masks(texts: Sequence[str]) -> list[str]:
    """Each text's mask, computed once per digit key."""
    by_key: dict[bytes, str] = {}
    found: list[str] = []
    for text in texts:
        key = digit_key(text)
        masked = by_key.get(key)
        if masked is None:
            masked = by_key[key] = mask(text)
        found.append(masked)
    return found


def templates(texts: Sequence[str]) -> list[str]:
    """Each text's template within this set: its mask, clustered with the set's other masks by
    Drain (a word that varies between otherwise equal lines becomes `<*>`). Deterministic: the
    same set of texts, in any order, gets the same templates."""
    masked = masks(texts)
    of_mask = _cluster(tuple(sorted(set(masked))))
    return [of_mask[m] for m in masked]


@lru_cache(maxsize=_CACHED_SETS)
def _cluster(distinct: tuple[str, ...]) -> dict[str, str]:
    """mask -> its Drain template, the masks fed in the (sorted) order given."""
    drain = Drain(depth=DRAIN_DEPTH, sim_th=DRAIN_SIMILARITY, max_children=DRAIN_MAX_CHILDREN, param_str=WILDCARD)
    clusters = {text: drain.add_log_message(text)[0] for text in distinct}
    return {text: " ".join(cluster.log_template_tokens) for text, cluster in clusters.items()}
