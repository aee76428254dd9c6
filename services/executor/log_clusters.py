"""Clustering of log lines by a normalised message template, for the embedded executor agent.

Digits, hex ids and UUIDs are masked so that lines that differ only in ids, counts or durations
fall into one cluster; the level is part of the key.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

_UUID = re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")
# Hex ids mix digits and a-f letters; a run of digits alone is a number (lag=98765 and
# lag=123456 are one template).
_HEX = re.compile(r"\b(?=[0-9a-fA-F]*\d)(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{6,}\b")
# Words mixing letters and digits (order ids, pod suffixes, SKU codes) are identifiers.
_MIXED_ID = re.compile(r"\b(?=[A-Za-z]*\d)(?=\d*[A-Za-z])[A-Za-z0-9]{4,}\b")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_SPACES = re.compile(r"\s+")
LEVEL_WEIGHT = {"FATAL": 4.0, "ERROR": 3.0, "WARN": 1.0}
MIN_COUNT = {"FATAL": 1, "ERROR": 3, "WARN": 5}
MIN_WARN_RATE_PER_MIN = 0.1


def message_template(message: str) -> str:
    text = _UUID.sub("<UUID>", message)
    text = _HEX.sub("<HEX>", text)
    text = _MIXED_ID.sub("<ID>", text)
    text = _NUMBER.sub("<N>", text)
    return _SPACES.sub(" ", text).strip()


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


def cluster_hits(hits: list[dict]) -> list[LogCluster]:
    """Clusters of WARN-or-worse hits (each hit: ts, level, message), heaviest first."""
    clusters: dict[tuple[str, str], LogCluster] = {}
    for index, hit in enumerate(hits):
        level = str(hit.get("level", "")).upper()
        if level not in LEVEL_WEIGHT:
            continue
        key = (level, message_template(str(hit.get("message", ""))))
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
