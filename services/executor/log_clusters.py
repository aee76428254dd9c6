"""Clustering of log lines by a normalised message template, for the embedded executor agent.

Digits, hex ids and UUIDs are masked so that lines that differ only in ids, counts or durations
fall into one cluster; the level is part of the key.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from shared.core.tool_results import LogHit
from shared.text_scan import per_text_cache

_UUID = re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")
# Hex ids mix digits and a-f letters; a run of digits alone is a number (lag=98765 and
# lag=123456 are one template).
_HEX = re.compile(r"\b(?=[0-9a-fA-F]*\d)(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{6,}\b")
# Words mixing letters and digits (order ids, pod suffixes, SKU codes) are identifiers.
_MIXED_ID = re.compile(r"\b(?=[A-Za-z]*\d)(?=\d*[A-Za-z])[A-Za-z0-9]{4,}\b")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
# Cheap necessary conditions, so that a pass runs only on a line it can change: a UUID holds
# `-hhhh-hhhh-` (its inner groups), a hex id a run of six hex characters, and hex ids, mixed ids
# and numbers all hold a digit.
_UUID_INNER = re.compile(r"-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-")
_HEX_RUN = re.compile(r"[0-9a-fA-F]{6}")
_DIGIT = re.compile(r"\d")
_ASCII_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
LEVEL_WEIGHT = {"FATAL": 4.0, "ERROR": 3.0, "WARN": 1.0}
MIN_COUNT = {"FATAL": 1, "ERROR": 3, "WARN": 5}
MIN_WARN_RATE_PER_MIN = 0.1
# A run may cluster its lines twice (a runbook follow-up, then the answer) and runs over one window
# read the same lines: each line's template is computed once. Longer lines are not kept.
_CACHED_TEMPLATES = 8192
_MAX_CACHED_CHARS = 2000


def message_template(message: str) -> str:
    return _template(message)


@per_text_cache(_CACHED_TEMPLATES, _MAX_CACHED_CHARS)
def _template(message: str) -> str:
    text = message
    if text.count("-") >= 4 and _UUID_INNER.search(text):
        text = _UUID.sub("<UUID>", text)
    if _DIGIT.search(text):
        if _HEX_RUN.search(text):
            text = _HEX.sub("<HEX>", text)
        text = _MIXED_ID.sub("<ID>", text)
        text = _NUMBER.sub("<N>", text)
    return " ".join(text.split())  # splits on the whitespace `\s` matches: runs become one space


def template_key(message: str) -> bytes:
    """Messages with equal keys have equal templates, so a batch computes each template once.

    Every pass treats the ten ASCII digits alike (no pattern names a single digit) and the number
    pass masks every digit, so the template does not depend on which ASCII digits a message
    holds: the key is the message with each of them spelled 0 (UTF-8, where no other character's
    bytes are ASCII; `surrogatepass` so that any `str` has a key)."""
    return message.encode("utf-8", "surrogatepass").translate(_ASCII_DIGITS_AS_ZERO)


@dataclass
class LogCluster:
    level: str
    template: str
    hit_indexes: list[int] = field(default_factory=list)  # indexes into the hits, in time order

    @property
    def count(self) -> int:
        return len(self.hit_indexes)

    @property
    def weight(self) -> float:
        return LEVEL_WEIGHT.get(self.level, 0.0) * math.log2(1 + self.count)


def cluster_hits(hits: Sequence[LogHit]) -> list[LogCluster]:
    """Clusters of WARN-or-worse hits, heaviest first."""
    clusters: dict[tuple[str, str], LogCluster] = {}
    templates: dict[bytes, str] = {}
    for index, hit in enumerate(hits):
        level = hit.level.upper()
        if level not in LEVEL_WEIGHT:
            continue
        message = hit.message
        shape = template_key(message)
        template = templates.get(shape)
        if template is None:
            template = templates[shape] = message_template(message)
        key = (level, template)
        clusters.setdefault(key, LogCluster(level=level, template=key[1])).hit_indexes.append(index)
    return sorted(clusters.values(), key=lambda c: (-c.weight, c.hit_indexes[0]))


def is_significant(cluster: LogCluster, window_minutes: float, relevant: bool) -> bool:
    """A burst worth reporting: enough lines for its level (and, for warnings, a rate well above
    background noise). A line that reports the symptom under investigation counts even once when
    it is an error."""
    if cluster.level in ("ERROR", "FATAL") and relevant:
        return True
    if cluster.count < MIN_COUNT.get(cluster.level, 10**9):
        return False
    if cluster.level == "WARN":
        return cluster.count / max(window_minutes, 1.0) >= MIN_WARN_RATE_PER_MIN
    return True
