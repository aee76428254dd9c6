"""Per-principal quotas on diagnoses: runs in flight and runs started per
minute. One caller cannot keep every role busy; a refusal says which limit and when to retry."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from shared.errors import Reason, ResourceExhausted

WINDOW_SECONDS = 60.0


class PrincipalQuotas:
    """Thread-safe counters per principal. `run_slot(principal)` is held for the whole run."""

    def __init__(self, max_in_flight: int, max_per_minute: int, busy_retry_seconds: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._max_in_flight = max_in_flight
        self._max_per_minute = max_per_minute
        self._busy_retry_seconds = busy_retry_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._in_flight: dict[str, int] = {}
        self._starts: dict[str, deque[float]] = {}

    @contextmanager
    def run_slot(self, principal: str) -> Iterator[None]:
        """Take one of the principal's slots for the enclosed run, or raise ResourceExhausted. The
        slot is given back however the run ends (an answer, an error, a cancelled call)."""
        self._acquire(principal)
        try:
            yield
        finally:
            self._release(principal)

    def in_flight(self, principal: str) -> int:
        with self._lock:
            return self._in_flight.get(principal, 0)

    def _acquire(self, principal: str) -> None:
        with self._lock:
            now = self._clock()
            starts = self._starts.setdefault(principal, deque())
            while starts and starts[0] <= now - WINDOW_SECONDS:
                starts.popleft()
            if self._in_flight.get(principal, 0) >= self._max_in_flight:
                raise ResourceExhausted(
                    f"too many diagnoses in flight: at most {self._max_in_flight} at once per caller "
                    "(max_runs_in_flight_per_principal); wait for one to finish",
                    retry_after_seconds=self._busy_retry_seconds, reason=Reason.QUOTA_RUNS_IN_FLIGHT,
                    metadata={"limit": self._max_in_flight, "setting": "ATTEST_MAX_RUNS_IN_FLIGHT_PER_PRINCIPAL"},
                )
            if len(starts) >= self._max_per_minute:
                raise ResourceExhausted(
                    f"too many diagnoses started: at most {self._max_per_minute} per minute per caller "
                    "(max_runs_per_minute_per_principal)",
                    retry_after_seconds=max(0.0, starts[0] + WINDOW_SECONDS - now),
                    reason=Reason.QUOTA_RUNS_PER_MINUTE,
                    metadata={"limit": self._max_per_minute, "setting": "ATTEST_MAX_RUNS_PER_MINUTE_PER_PRINCIPAL"},
                )
            starts.append(now)
            self._in_flight[principal] = self._in_flight.get(principal, 0) + 1

    def _release(self, principal: str) -> None:
        with self._lock:
            remaining = self._in_flight.get(principal, 0) - 1
            if remaining > 0:
                self._in_flight[principal] = remaining
            else:
                self._in_flight.pop(principal, None)
