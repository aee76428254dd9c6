"""One cluster of the six services as `make run` starts them, TLS on (the launcher's throwaway CA),
two principals (alice and bob) with their own tokens, and tight per-principal quotas, so that
every attack in tests/security/attacks.py can be tried over real processes."""

from __future__ import annotations

import hashlib
from pathlib import Path

import grpc
import pytest

from gateway.launcher import Cluster
from tests.integration.conftest import start_cluster
from tests.otlp_receiver import OtlpReceiver

TOKENS = {"alice": "alice-token-5f1c9a", "bob": "bob-token-0d37e2"}
MAX_IN_FLIGHT = 2


@pytest.fixture(scope="session")
def otlp_receiver():
    with OtlpReceiver() as receiver:
        yield receiver


@pytest.fixture(scope="session")
def secure_cluster(tmp_path_factory, otlp_receiver) -> Cluster:
    root = tmp_path_factory.mktemp("secure-cluster")
    tokens_file = root / "tokens"
    tokens_file.write_text("".join(f"{name} sha256:{hashlib.sha256(token.encode()).hexdigest()}\n"
                                   for name, token in TOKENS.items()), encoding="utf-8")
    env = {
        "ATTEST_AUTH_TOKENS_FILE": str(tokens_file),
        "ATTEST_AUTH_TOKEN": "",
        "ATTEST_MAX_RUNS_IN_FLIGHT_PER_PRINCIPAL": str(MAX_IN_FLIGHT),
        "ATTEST_MAX_RUNS_PER_MINUTE_PER_PRINCIPAL": "1000",
    }
    running = start_cluster(root, otlp_receiver.endpoint, env)
    running.estate_url = f"sqlite:///{root / 'estate.db'}"
    try:
        yield running
    finally:
        running.stop()


def token(principal: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {TOKENS[principal]}")]


@pytest.fixture()
def front(secure_cluster):
    with grpc.insecure_channel(secure_cluster.gateway_addr) as channel:
        yield channel


def identity_channel(cluster: Cluster, role: str, identity: str | None) -> grpc.Channel:
    """A channel to `role` presenting `identity`'s certificate (one the launcher made), or no
    TLS at all with None."""
    address = cluster.address(role)
    if identity is None:
        return grpc.insecure_channel(address)
    tls: Path = cluster.tls_dir
    credentials = grpc.ssl_channel_credentials(
        root_certificates=(tls / "ca.pem").read_bytes(),
        private_key=(tls / f"{identity}-key.pem").read_bytes(),
        certificate_chain=(tls / f"{identity}.pem").read_bytes(),
    )
    return grpc.secure_channel(address, credentials)
