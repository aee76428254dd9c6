"""What every benchmark under tests/bench/ shares: the machine description, a median timer, and
writing results as JSON under var/bench/. Benchmarks are scripts run by `make bench`, never pytest
tests: timings belong here, not in pass/fail tests (STYLE: Tests)."""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
RESULTS_DIR = REPO_ROOT / "var" / "bench"


def machine() -> dict[str, Any]:
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or "",
        "cpu_count": os.cpu_count(),
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
    }


def median_seconds(action: Callable[[], Any], repeats: int) -> tuple[float, list[float]]:
    """Median wall time of `repeats` runs of `action` (after one untimed warm-up run)."""
    action()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        action()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples), samples


def write_result(name: str, result: dict[str, Any]) -> Path:
    """Write `var/bench/<name>.json` with the machine and the time of the run; returns the path."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    document = {
        "benchmark": name,
        "measured_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": machine(),
        **result,
    }
    path.write_text(json.dumps(document, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    return path
