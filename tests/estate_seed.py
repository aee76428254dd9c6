"""Lines added to a loaded estate by a test: what a service would have logged, secrets included.

The executor's SQL backends read the estate database at every call, so a line seeded into a
running Cluster's estate (`sqlite:///<root>/estate.db`, loaded by `start_cluster`) is found by
the next question about its service and window."""

from __future__ import annotations

from datetime import datetime

from services.executor.estate import create_estate_engine, log_line


def seed_log_line(estate_url: str, message: str, *, service: str, ts: datetime, level: str = "ERROR",
                  host: str = "seeded-host-1") -> None:
    """One more log line (`ts` timezone-aware) in the estate at `estate_url`."""
    engine = create_estate_engine(estate_url)
    try:
        with engine.begin() as connection:
            connection.execute(log_line.insert(), [
                {"service": service, "ts": ts, "level": level, "host": host, "message": message},
            ])
    finally:
        engine.dispose()
