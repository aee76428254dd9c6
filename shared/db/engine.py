"""Engines for the one `DATABASE_URL`: a SQLite file by default, PostgreSQL in production.

SQLite is tuned for many threads of one process sharing a file: WAL so readers do not block the
writer, a busy timeout so concurrent writers queue instead of failing, foreign keys enforced.
Both write JSON columns with `dumps_stored_json`, so a document is stored the same on either
(its module states the policy for NaN and Infinity). A SQLite file holds the audit (questions,
evidence), so it is readable by its owner only (`owner_only_sqlite_file`).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import StaticPool

from shared.db.stored_json import dumps_stored_json

SQLITE_BUSY_TIMEOUT_MS = 5000
POSTGRES_CONNECT_TIMEOUT_S = 10
OWNER_ONLY = 0o600
# The files SQLite keeps beside a database (WAL mode, rollback journal).
SQLITE_SIBLING_SUFFIXES = ("-wal", "-shm", "-journal")


def owner_only_sqlite_file(path: Path) -> None:
    """Create the database file `path` readable and writable by its owner only (0600), before
    SQLite opens it: SQLite creates its -wal, -shm and -journal files with the database file's
    permissions, so they follow. A file that exists already (with any siblings) loses its group
    and other bits; no bit is ever added, so a store made read-only stays read-only."""
    try:
        os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, OWNER_ONLY))
    except FileExistsError:
        pass
    except OSError:
        return  # e.g. a read-only directory: SQLite reports it when it opens the file
    for candidate in (path, *(path.with_name(path.name + suffix) for suffix in SQLITE_SIBLING_SUFFIXES)):
        try:
            mode = stat.S_IMODE(candidate.stat().st_mode)
            if mode & ~OWNER_ONLY:
                candidate.chmod(mode & OWNER_ONLY)
        except OSError:
            continue  # absent, or not ours to change


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
        # Under WAL, NORMAL syncs at checkpoints instead of at every commit: a commit survives
        # a crash of the process (kill -9); only a power loss or an OS crash can lose the last
        # few commits. FULL made the fsync per commit the largest cost of a diagnosis.
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    finally:
        cursor.close()


def make_engine(url: str, **kwargs: Any) -> Engine:
    """An Engine for `url`; extra keyword arguments go to `sqlalchemy.create_engine`."""
    kwargs["json_serializer"] = dumps_stored_json  # the one policy for every JSON column
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        connect_args = kwargs.pop("connect_args", {})
        if parsed.get_backend_name() == "postgresql":
            # Without it an unroutable host hangs start-up (and the migrate CLI) for minutes.
            connect_args.setdefault("connect_timeout", POSTGRES_CONNECT_TIMEOUT_S)
        return create_engine(url, pool_pre_ping=True, connect_args=connect_args, **kwargs)

    database = parsed.database or ""
    in_memory = database in ("", ":memory:") or database.startswith("file::memory:")
    connect_args = {"check_same_thread": False, **kwargs.pop("connect_args", {})}
    if in_memory:
        # Each connection to :memory: is a new empty database: share the single one.
        engine = create_engine(
            url, connect_args=connect_args, poolclass=StaticPool, **kwargs
        )
    else:
        path = Path(database).expanduser().resolve()
        path.parent.mkdir(parents=True, exist_ok=True)
        if not database.startswith("file:"):  # a URI filename is SQLite's to interpret
            owner_only_sqlite_file(path)
        engine = create_engine(url, connect_args=connect_args, **kwargs)
    event.listen(engine, "connect", _sqlite_pragmas)
    return engine


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    """Sessions whose loaded objects stay readable after commit (they are converted to dicts)."""
    return sessionmaker(bind=engine, expire_on_commit=False)


def traced_session_factory(url: str, tracer_provider: Any) -> sessionmaker[Session]:
    """Engine + SQL spans + sessions: what every service that touches the store needs."""
    from shared.telemetry import instrument_engine  # telemetry is optional for plain DB users

    engine = make_engine(url)
    instrument_engine(engine, tracer_provider)
    return make_session_factory(engine)
