"""The six services as real processes on ephemeral loopback ports, a real OTLP/gRPC receiver,
SQLite files for the audit store and the demo estate."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from gateway.launcher import REPO_ROOT, Cluster
from services.executor.estate import load_estate
from shared.db.engine import make_engine, make_session_factory
from shared.db.migrate import upgrade
from shared.db.run_store import RunStore
from tests.otlp_receiver import OtlpReceiver

TEST_TOKEN = "integration-token"


@pytest.fixture(scope="session")
def otlp_receiver():
    with OtlpReceiver() as receiver:
        yield receiver


def start_cluster(root: Path, otlp_endpoint: str, extra_env: dict[str, str] | None = None) -> Cluster:
    """Six real processes over fresh SQLite files; `extra_env` points roles at scripted models."""
    database_url = f"sqlite:///{root / 'attest.db'}"
    estate_url = f"sqlite:///{root / 'estate.db'}"
    upgrade(database_url)
    load_estate(estate_url, REPO_ROOT / "demo" / "estate")
    env = {
        "ATTEST_DATABASE_URL": database_url,
        "ATTEST_ESTATE_DATABASE_URL": estate_url,
        "OTEL_EXPORTER_OTLP_ENDPOINT": otlp_endpoint,
        "ATTEST_AUTH_TOKEN": TEST_TOKEN,
        **(extra_env or {}),
    }
    running = Cluster(env, log_dir=root / "logs")
    running.gateway_addr = running.start(timeout=90)
    running.database_url = database_url
    return running


@pytest.fixture(scope="session")
def cluster(tmp_path_factory, otlp_receiver):
    running = start_cluster(tmp_path_factory.mktemp("cluster"), otlp_receiver.endpoint)
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
