"""Bring a database to the latest schema: `python -m shared.db.migrate [--url URL]`.

Used by `make run`, the deploy init step and tests. Without `--url` the URL comes from the
settings (ATTEST_DATABASE_URL, `.env`, built-in default).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import exc as sa_exc

from shared.config import CommonSettings
from shared.db.connectivity import display_url, failure_reason

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
HEAD_REVISION = "head"


def alembic_config(url: str) -> Config:
    """An Alembic config that works from any working directory (no alembic.ini needed)."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    # Passed as an attribute, not a main option: configparser would mangle a '%' in a password.
    config.attributes["url"] = url
    config.attributes["programmatic"] = True
    return config


def upgrade(url: str, revision: str = HEAD_REVISION) -> None:
    """Apply every migration up to `revision` to the database at `url`."""
    command.upgrade(alembic_config(url), revision)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m shared.db.migrate", description="Upgrade the Attest database schema."
    )
    parser.add_argument("--url", help="SQLAlchemy database URL (default: ATTEST_DATABASE_URL)")
    args = parser.parse_args(argv)
    url = args.url or CommonSettings().database_url
    shown = display_url(url)
    try:
        upgrade(url)
    except sa_exc.ArgumentError as exc:
        print(f"migrate: invalid database URL {shown}: {exc}", file=sys.stderr)
        return 2
    except sa_exc.DBAPIError as exc:
        print(f"migrate: cannot use database {shown}: {failure_reason(exc)}", file=sys.stderr)
        return 1
    print(f"migrate: {shown} is at the latest schema")
    return 0


if __name__ == "__main__":
    sys.exit(main())
