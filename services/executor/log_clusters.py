"""Clustering of log lines by message template, for the embedded executor agent.

The templates are the shared ones (`shared/log_templates.py`, on drain3): ids, counts and
durations are masked and a word that varies between otherwise equal lines becomes a parameter, so
such lines fall into one cluster; the level is part of the key.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from shared.core.tool_results import LogHit
from shared.log_templates import digit_key, mask, templates

LEVEL_WEIGHT = {"FATAL": 4.0, "ERROR": 3.0, "WARN": 1.0}
# A warning is common: a burst of them is worth reporting, one is not. One ERROR or FATAL line is
# evidence (ranked by its weight, never dropped).
MIN_COUNT = {"FATAL": 1, "ERROR": 1, "WARN": 5}
MIN_WARN_RATE_PER_MIN = 0.1
# Spellings of the same severities (the backends normalise them; a stored result may predate that).
LEVEL_ALIASES = {"CRITICAL": "FATAL", "PANIC": "FATAL", "WARNING": "WARN"}


def message_template(message: str) -> str:
    """One message's template on its own: its mask (`shared.log_templates.mask`)."""
    return mask(message)


def template_key(message: str) -> bytes:
    """Messages with equal keys have equal templates (`shared.log_templates.digit_key`)."""
    return digit_key(message)


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


def level_of(hit: LogHit) -> str:
    """The hit's level, upper-cased, with FATAL's and WARN's other spellings read as them."""
    level = hit.level.upper()
    return LEVEL_ALIASES.get(level, level)


def cluster_hits(hits: Sequence[LogHit]) -> list[LogCluster]:
    """Clusters of WARN-or-worse hits, heaviest first. A line's template is its template among the
    messages of these hits (`shared.log_templates.templates`)."""
    kept = [(index, level_of(hit)) for index, hit in enumerate(hits) if level_of(hit) in LEVEL_WEIGHT]
    clusters: dict[tuple[str, str], LogCluster] = {}
    for (index, level), template in zip(kept, templates([hits[index].message for index, _ in kept])):
        key = (level, template)
        clusters.setdefault(key, LogCluster(level=level, template=template)).hit_indexes.append(index)
    return sorted(clusters.values(), key=lambda c: (-c.weight, c.hit_indexes[0]))


def is_significant(cluster: LogCluster, window_minutes: float) -> bool:
    """A cluster worth reporting: any ERROR or FATAL line (one is evidence, ranked by its weight);
    warnings in a burst, enough of them at a rate well above background noise. A line of another
    level (INFO, or UNKNOWN: no level could be read) is no error by itself."""
    if cluster.level in ("ERROR", "FATAL"):
        return cluster.count >= MIN_COUNT[cluster.level]
    if cluster.level == "WARN":
        return cluster.count >= MIN_COUNT["WARN"] and cluster.count / max(window_minutes, 1.0) >= MIN_WARN_RATE_PER_MIN
    return False
