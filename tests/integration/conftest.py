"""The six services as real processes on ephemeral loopback ports, a real OTLP/gRPC receiver,
SQLite files for the audit store and the demo estate.

With `ATTEST_TEST_DATABASE=postgresql` the audit store of every cluster is a fresh database on a
throwaway PostgreSQL server instead (`make test-integration-postgres`); the estate stays SQLite.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from gateway.launcher import REPO_ROOT, Cluster
from services.executor.estate import load_estate
from shared.db.engine import make_engine, make_session_factory
from shared.db.migrate import upgrade
from shared.db.run_store import RunStore
from shared.principals import token_file_line
from tests.otlp_receiver import OtlpReceiver

TEST_TOKEN = "integration-token"
# The clusters here run load, concurrency and fuzz tests as one caller: the per-principal quotas
# are raised for them; tests of the quotas themselves set their own limits.
GENEROUS_QUOTAS = {
    "ATTEST_MAX_RUNS_IN_FLIGHT_PER_PRINCIPAL": "1000",
    "ATTEST_MAX_RUNS_PER_MINUTE_PER_PRINCIPAL": "100000",
}


@pytest.fixture(scope="session")
def otlp_receiver():
    with OtlpReceiver() as receiver:
        yield receiver


DatabaseFactory = Callable[[Path], str]


def _use_postgresql() -> bool:
    choice = os.environ.get("ATTEST_TEST_DATABASE", "sqlite").lower()
    if choice not in ("sqlite", "postgresql"):
        raise pytest.UsageError(f"ATTEST_TEST_DATABASE must be sqlite or postgresql, not {choice!r}")
    return choice == "postgresql"


@pytest.fixture(scope="session")
def new_database(request) -> DatabaseFactory:
    """A factory of empty audit-store URLs, one per cluster: a SQLite file under the cluster's
    directory, or (ATTEST_TEST_DATABASE=postgresql) a new database on the throwaway server."""
    if not _use_postgresql():
        return lambda root: f"sqlite:///{root / 'attest.db'}"
    admin_url = request.getfixturevalue("postgres_admin_url")
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    request.addfinalizer(admin.dispose)

    def create(_root: Path) -> str:
        name = f"attest_it_{secrets.token_hex(4)}"
        with admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
        return make_url(admin_url).set(database=name).render_as_string(hide_password=False)

    return create


def start_cluster(root: Path, otlp_endpoint: str, extra_env: dict[str, str] | None = None,
                  *, database_url: str | None = None, replicas: dict[str, int] | None = None) -> Cluster:
    """Six real processes over a freshly migrated audit store (`database_url`, or a SQLite file
    under `root`) and a SQLite demo estate; `extra_env` points roles at scripted models;
    `replicas` runs several processes of a role."""
    database_url = database_url or f"sqlite:///{root / 'attest.db'}"
    estate_url = f"sqlite:///{root / 'estate.db'}"
    upgrade(database_url)
    load_estate(estate_url, REPO_ROOT / "demo" / "estate")
    env = {
        "ATTEST_DATABASE_URL": database_url,
        "ATTEST_ESTATE_DATABASE_URL": estate_url,
        "OTEL_EXPORTER_OTLP_ENDPOINT": otlp_endpoint,
        "ATTEST_AUTH_TOKEN": TEST_TOKEN,
        **GENEROUS_QUOTAS,
        **(extra_env or {}),
    }
    running = Cluster(env, log_dir=root / "logs", replicas=replicas)
    running.gateway_addr = running.start(timeout=90)
    running.database_url = database_url
    return running


@contextmanager
def running_cluster(root: Path, otlp_endpoint: str, database_url: str, extra_env: dict[str, str] | None = None,
                    backends: tuple = ()) -> Iterator[Cluster]:
    """`start_cluster` for a `with` block: the processes are stopped, and the recorded backends
    (anything with `close()`) closed, when it ends."""
    running = start_cluster(root, otlp_endpoint, extra_env, database_url=database_url)
    try:
        yield running
    finally:
        running.stop()
        for backend in backends:
            backend.close()


def principal_token(principal: str) -> str:
    """The bearer token of a test principal in a tokens file `write_tokens_file` wrote."""
    return f"{principal}-token-7c1e9b"


def as_principal(principal: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {principal_token(principal)}")]


def write_tokens_file(root: Path, principals: tuple[str, ...]) -> Path:
    """An ATTEST_AUTH_TOKENS_FILE naming `principals` (their tokens: `principal_token`)."""
    tokens = root / "tokens"
    tokens.write_text("# test callers\n" + "\n".join(token_file_line(p, principal_token(p)) for p in principals)
                      + "\n", encoding="utf-8")
    return tokens


@pytest.fixture(scope="session")
def cluster(tmp_path_factory, otlp_receiver, new_database):
    root = tmp_path_factory.mktemp("cluster")
    running = start_cluster(root, otlp_receiver.endpoint, database_url=new_database(root))
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="session")
def run_store(cluster) -> RunStore:
    return RunStore(make_session_factory(make_engine(cluster.database_url)))


@pytest.fixture()
def gateway_channel(cluster):
    with grpc.insecure_channel(cluster.gateway_addr) as channel:
        yield channel


@pytest.fixture(scope="session")
def auth_metadata():
    return [("authorization", f"Bearer {TEST_TOKEN}")]
