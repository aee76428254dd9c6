"""Readiness in the health service: SERVING only while everything a process needs works.

Liveness is the process answering at all; readiness (the status of "" and of the process's own
service names) is re-checked periodically: a role is NOT_SERVING while its database is
unreachable, the gateway while a role it needs is down or not serving. Each
check returns None when fine, else a short reason that is logged when the status changes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from shared.db.connectivity import DatabaseUnavailable, check_database

_log = logging.getLogger(__name__)

Check = Callable[[], str | None]


class HealthSetter(Protocol):
    def set(self, service: str, status: int) -> None: ...


def database_check(url: str, timeout_seconds: float) -> Check:
    """A check that the database at `url` answers `SELECT 1`."""

    def check() -> str | None:
        try:
            check_database(url, timeout_seconds=timeout_seconds, must_exist=True)
        except DatabaseUnavailable as exc:
            return str(exc)
        return None

    return check


def downstream_check(name: str, channel: grpc.Channel, timeout_seconds: float) -> Check:
    """A check that the role behind `channel` answers Health.Check with SERVING."""
    # types-grpcio-health-checking declares HealthStub without its methods (see health_probe.py).
    call: grpc.UnaryUnaryMultiCallable[health_pb2.HealthCheckRequest, health_pb2.HealthCheckResponse] = (
        health_pb2_grpc.HealthStub(channel).Check  # type: ignore[attr-defined]
    )

    def check() -> str | None:
        try:
            response = call(health_pb2.HealthCheckRequest(service=""), timeout=timeout_seconds)
        except grpc.RpcError as exc:
            return f"the {name} is unreachable ({_code_name(exc)})"
        if response.status != health_pb2.HealthCheckResponse.SERVING:
            return f"the {name} is not serving"
        return None

    return check


def _code_name(exc: grpc.RpcError) -> str:
    code = getattr(exc, "code", None)
    value = code() if callable(code) else None
    return value.name if isinstance(value, grpc.StatusCode) else "error"


class ReadinessMonitor:
    """Runs `checks` every `interval_seconds` and reports the result for `service_names`."""

    def __init__(self, checks: Mapping[str, Check], health: HealthSetter, service_names: Sequence[str],
                 interval_seconds: float) -> None:
        self._checks = dict(checks)
        self._health = health
        self._names = ("", *service_names)
        self._interval = interval_seconds
        self._stopped = threading.Event()
        self._ready: bool | None = None

    def check_now(self) -> bool:
        """Run every check once and report the outcome; True when all pass."""
        reasons = [reason for reason in (check() for check in self._checks.values()) if reason]
        ready = not reasons
        if ready != self._ready:
            if ready:
                _log.info("ready: %s", ", ".join(self._checks) or "nothing to check")
            else:
                _log.warning("not ready: %s", "; ".join(reasons))
            status = health_pb2.HealthCheckResponse.SERVING if ready else health_pb2.HealthCheckResponse.NOT_SERVING
            for name in self._names:
                self._health.set(name, status)
            self._ready = ready
        return ready

    def start(self) -> None:
        """Check now, then keep checking on a daemon thread until `stop()`."""
        self.check_now()
        if self._checks:
            threading.Thread(target=self._loop, name="readiness", daemon=True).start()

    def stop(self) -> None:
        self._stopped.set()

    def _loop(self) -> None:
        while not self._stopped.wait(self._interval):
            try:
                self.check_now()
            except Exception:  # a check must never end the monitor: report and try again
                _log.exception("readiness check failed")
