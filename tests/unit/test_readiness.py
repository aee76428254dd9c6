"""Readiness (shared/readiness.py): what the health service reports as checks fail and recover."""

from __future__ import annotations

import sqlite3

from grpc_health.v1 import health_pb2

from shared.readiness import ReadinessMonitor, database_check

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class RecordingHealth:
    def __init__(self) -> None:
        self.status: dict[str, int] = {}

    def set(self, service: str, status: int) -> None:
        self.status[service] = status


def test_not_serving_while_any_check_fails_and_serving_again_after() -> None:
    broken = {"db": False}
    health = RecordingHealth()
    monitor = ReadinessMonitor(
        {"db": lambda: "cannot use database x" if broken["db"] else None, "other": lambda: None},
        health, ["attest.planner.v1.PlannerService"], interval_seconds=60)
    assert monitor.check_now()
    assert health.status == {"": SERVING, "attest.planner.v1.PlannerService": SERVING}
    broken["db"] = True
    assert not monitor.check_now()
    assert health.status == {"": NOT_SERVING, "attest.planner.v1.PlannerService": NOT_SERVING}
    broken["db"] = False
    assert monitor.check_now()
    assert set(health.status.values()) == {SERVING}


def test_database_check_reports_a_vanished_sqlite_file_without_recreating_it(tmp_path) -> None:
    path = tmp_path / "attest.db"
    sqlite3.connect(path).close()
    check = database_check(f"sqlite:///{path}", timeout_seconds=1)
    assert check() is None
    path.unlink()
    reason = check()
    assert reason is not None and "the file is missing" in reason
    assert not path.exists(), "the check must not create an empty database in its place"
