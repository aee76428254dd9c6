"""Alembic environment: which database to migrate and how.

The URL comes from, in order: `alembic -x url=...`, the `url` attribute set by
`shared.db.migrate.upgrade`, then the settings (ATTEST_DATABASE_URL, `.env`, built-in default).
"""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context

from shared.config import CommonSettings
from shared.db.engine import make_engine
from shared.db.models import Base

config = context.config
target_metadata = Base.metadata

# Only the alembic CLI loads logging from alembic.ini; programmatic callers keep their own setup.
if config.config_file_name is not None and not config.attributes.get("programmatic"):
    fileConfig(config.config_file_name)


def _database_url() -> str:
    from_cli = context.get_x_argument(as_dictionary=True).get("url")
    return from_cli or config.attributes.get("url") or CommonSettings().database_url


def run_migrations_offline() -> None:
    """`alembic upgrade --sql`: print the DDL instead of executing it."""
    url = _database_url()
    context.configure(
        url=url,
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=url.startswith("sqlite"),
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    url = _database_url()
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            context.configure(
                connection=connection,
                target_metadata=target_metadata,
                # SQLite cannot ALTER most things; batch mode rebuilds the table instead.
                render_as_batch=engine.dialect.name == "sqlite",
            )
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
