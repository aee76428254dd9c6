"""Whether a database can be used at all: once when a process starts, then for readiness.

A service whose database is unreachable must not come up and then fail every call: it exits
non-zero with one line naming the database (password hidden) and the driver's first line of
cause. `python -m shared.db.migrate` words its failures the same way. While running, the same
check (with `must_exist`, so that a vanished SQLite file is not silently recreated empty) makes
the role's health NOT_SERVING (shared/readiness.py).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from sqlalchemy import exc as sa_exc
from sqlalchemy import text
from sqlalchemy.engine import make_url

from shared.db.engine import make_engine


class DatabaseUnavailable(RuntimeError):
    """The database at a URL cannot be reached or used; the message is one line."""


def display_url(url: str) -> str:
    """`url` with its password hidden (or as given when it does not parse)."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except sa_exc.ArgumentError:
        return url


def failure_reason(exc: BaseException) -> str:
    """The first line of a driver error: it names the cause (refused, auth, unknown database)."""
    cause = exc.orig if isinstance(exc, sa_exc.DBAPIError) and exc.orig is not None else exc
    message = str(cause).strip()
    return message.splitlines()[0] if message else type(exc).__name__


def _sqlite_file(url: str) -> Path | None:
    """The file of a file-backed SQLite URL, else None."""
    try:
        parsed = make_url(url)
    except sa_exc.ArgumentError:
        return None
    database = parsed.database or ""
    if parsed.get_backend_name() != "sqlite" or database in ("", ":memory:") or database.startswith("file:"):
        return None
    return Path(database).expanduser()


def _timeout_args(url: str, timeout_seconds: float) -> dict[str, Any]:
    """Driver arguments bounding how long one connection attempt may take."""
    backend = make_url(url).get_backend_name()
    if backend == "postgresql":
        return {"connect_args": {"connect_timeout": max(1, math.ceil(timeout_seconds))}}
    if backend == "sqlite":
        return {"connect_args": {"timeout": timeout_seconds}}
    return {}


def check_database(url: str, *, timeout_seconds: float | None = None, must_exist: bool = False) -> None:
    """Open one connection and run `SELECT 1`; raise DatabaseUnavailable if that fails.

    `timeout_seconds` bounds the connection attempt; with `must_exist`, a SQLite file that is
    not there is unavailable (instead of being created empty).
    """
    shown = display_url(url)
    if must_exist:
        path = _sqlite_file(url)
        if path is not None and not path.is_file():
            raise DatabaseUnavailable(f"cannot use database {shown}: the file is missing")
    try:
        extra = _timeout_args(url, timeout_seconds) if timeout_seconds is not None else {}
        engine = make_engine(url, **extra)
    except (sa_exc.ArgumentError, ImportError) as exc:
        raise DatabaseUnavailable(f"invalid database URL {shown}: {failure_reason(exc)}") from exc
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except sa_exc.SQLAlchemyError as exc:
        raise DatabaseUnavailable(f"cannot use database {shown}: {failure_reason(exc)}") from exc
    finally:
        engine.dispose()
