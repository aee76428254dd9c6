"""Fixtures shared by every test folder."""

from __future__ import annotations

import os

import pytest

from tests.postgres_cluster import PostgresCluster, PostgresUnavailable


@pytest.fixture(scope="session")
def postgres_admin_url():
    """An admin URL of a real PostgreSQL: ATTEST_TEST_POSTGRES_URL, or a throwaway local cluster.

    CI installs the server package, so there a missing server is a failure, not a skip.
    """
    if os.environ.get("ATTEST_TEST_POSTGRES_URL"):
        yield os.environ["ATTEST_TEST_POSTGRES_URL"]
        return
    try:
        cluster = PostgresCluster().start()
    except PostgresUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL is required in CI: {exc}")
        pytest.skip(f"PostgreSQL not available here: {exc}")
    try:
        yield cluster.admin_url
    finally:
        cluster.stop()
