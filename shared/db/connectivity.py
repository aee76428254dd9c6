"""Whether a database can be used at all, checked once when a process starts.

A service whose database is unreachable must not come up and then fail every call: it exits
non-zero with one line naming the database (password hidden) and the driver's first line of
cause. `python -m shared.db.migrate` words its failures the same way.
"""

from __future__ import annotations

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


def check_database(url: str) -> None:
    """Open one connection and run `SELECT 1`; raise DatabaseUnavailable if that fails."""
    shown = display_url(url)
    try:
        engine = make_engine(url)
    except (sa_exc.ArgumentError, ImportError) as exc:
        raise DatabaseUnavailable(f"invalid database URL {shown}: {failure_reason(exc)}") from exc
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except sa_exc.SQLAlchemyError as exc:
        raise DatabaseUnavailable(f"cannot use database {shown}: {failure_reason(exc)}") from exc
    finally:
        engine.dispose()
