"""Where each service spends its CPU during diagnoses: py-spy attached to every process.

py-spy samples the stacks of a running process from outside (no code change, no restart). It
leaves out threads it judges idle, but in its non-blocking mode (used here, so that sampling does
not pause the services) that judgement is a heuristic (py-spy issue #480): a thread waiting inside
a C call (a gRPC poller, a lock) is sometimes counted as running, so the totals run above the CPU
the kernel counts (`chain_bench.process_cpu_seconds`, reported beside them). Read py-spy for where
the time goes, the kernel's count for how much there is. The raw output (one line per distinct stack, with its sample count) is
folded into two tables per service: the frames that burn CPU themselves (self) and the project
functions under which the CPU was spent (inclusive).
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

SAMPLE_RATE_HZ = 200
PROJECT_PACKAGES = ("gateway/", "services/", "shared/")


def _py_spy() -> str | None:
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


def _frame_label(frame: str) -> str:
    """`function (path/to/file.py:123)` → `function (file.py)` for the tables."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    return f"{name} ({'/'.join(Path(path).parts[-2:])})" if path else name


def _is_project(frame: str) -> bool:
    # py-spy shortens a file to its package path: `gateway/graph.py:214`, `grpc/_server.py:788`.
    _, _, where = frame.partition(" (")
    return where.startswith(PROJECT_PACKAGES)


def fold(raw: str, diagnoses: int, top: int = 12) -> dict[str, Any]:
    """Summarise py-spy's raw (collapsed-stack) output for `diagnoses` runs."""
    self_time: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        samples = int(count)
        total += samples
        frames = stack.split(";")
        self_time[_frame_label(frames[-1])] += samples
        for label in {_frame_label(frame) for frame in frames if _is_project(frame)}:
            inclusive[label] += samples
    per_diagnosis_ms = 1000.0 / SAMPLE_RATE_HZ / max(diagnoses, 1)

    def table(counter: Counter[str]) -> list[dict[str, Any]]:
        return [{"frame": label, "share": round(samples / total, 3), "ms_per_diagnosis": round(samples * per_diagnosis_ms, 2)}
                for label, samples in counter.most_common(top)] if total else []

    return {"cpu_ms_per_diagnosis": round(total * per_diagnosis_ms, 1), "self": table(self_time),
            "project_inclusive": table(inclusive)}


def profile(pids: dict[str, int], run: Callable[[], int], workdir: Path) -> dict[str, Any]:
    """Attach py-spy to every pid, call `run()` (which returns how many diagnoses it made), and
    fold each service's samples. Returns {"error": ...} when py-spy is missing or cannot attach."""
    binary = _py_spy()
    if binary is None:
        return {"error": "py-spy is not installed (pip install py-spy)"}
    spies: dict[str, tuple[subprocess.Popen, Path]] = {}
    for name, pid in pids.items():
        output = workdir / f"{name}.folded"
        process = subprocess.Popen(
            [binary, "record", "--pid", str(pid), "--rate", str(SAMPLE_RATE_HZ), "--format", "raw",
             "--output", str(output), "--nonblocking"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        spies[name] = (process, output)
    try:
        _wait_attached(spies)
    except RuntimeError as exc:
        for process, _ in spies.values():
            if process.poll() is None:
                process.kill()
        return {"error": str(exc)}
    try:
        diagnoses = run()
    finally:
        for process, _ in spies.values():
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
    result: dict[str, Any] = {"sample_rate_hz": SAMPLE_RATE_HZ, "services": {}}
    for name, (process, output) in spies.items():
        try:
            _, errors = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            _, errors = process.communicate()
        if not output.exists():
            lines = (errors or "").strip().splitlines()
            result["services"][name] = {"error": lines[-1] if lines else "py-spy wrote nothing"}
            continue
        result["services"][name] = fold(output.read_text(encoding="utf-8"), diagnoses)
    result["diagnoses"] = diagnoses
    return result


def _wait_attached(spies: dict[str, tuple[subprocess.Popen, Path]], seconds: float = 1.5) -> None:
    """py-spy needs a moment to attach; one that exits at once could not (permissions)."""
    time.sleep(seconds)
    failed = {name: process for name, (process, _) in spies.items() if process.poll() is not None}
    if failed:
        name, process = next(iter(failed.items()))
        message = (process.stderr.read() if process.stderr else "").strip() or f"exit {process.returncode}"
        raise RuntimeError(f"py-spy could not attach to {name}: {message}")
