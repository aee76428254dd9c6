"""How raw Prometheus series become the signals an SRE reads (issue 16, points 1-2)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class SeriesReading:
    """The settings of the reading: instance and status labels, the error pattern, templates."""

    instance_labels: tuple[str, ...] = ("pod", "instance")
    status_labels: tuple[str, ...] = ("status", "code", "status_code")
    error_status_pattern: str = "5.."
    signals: Mapping[str, tuple[str, str]] = field(default_factory=dict)  # name -> (template, unit)
