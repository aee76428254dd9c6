"""Settings come from ATTEST_* variables, the standard OTEL variable and `.env`."""

from __future__ import annotations

import os

import pytest

from shared.config import (
    CommonSettings,
    ComposerSettings,
    ExecutorSettings,
    GatekeeperSettings,
    GatewaySettings,
    PlannerSettings,
    VerifierSettings,
    service_addr,
)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch, tmp_path):
    """No ATTEST_/OTEL_ variable or `.env` from the developer's shell leaks into these tests."""
    for name in list(os.environ):
        if name.startswith(("ATTEST_", "OTEL_")):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def test_common_defaults():
    settings = CommonSettings()
    assert settings.bind_host == "127.0.0.1"
    assert settings.database_url == "sqlite:///var/attest.db"
    assert settings.otlp_endpoint is None
    assert settings.max_message_bytes == 8 * 1024 * 1024
    assert settings.shutdown_grace_seconds == 5.0
    assert settings.max_workers == 16


@pytest.mark.parametrize(
    ("settings_class", "role", "port"),
    [
        (GatewaySettings, "GATEWAY", 50050),
        (PlannerSettings, "PLANNER", 50051),
        (ExecutorSettings, "EXECUTOR", 50052),
        (GatekeeperSettings, "GATEKEEPER", 50053),
        (VerifierSettings, "VERIFIER", 50054),
        (ComposerSettings, "COMPOSER", 50055),
    ],
)
def test_each_role_reads_its_own_port_variable(monkeypatch, settings_class, role, port):
    assert settings_class().port == port
    monkeypatch.setenv(f"ATTEST_{role}_PORT", "6123")
    # Another role's variable must not leak in.
    other = "PLANNER" if role != "PLANNER" else "GATEWAY"
    monkeypatch.setenv(f"ATTEST_{other}_PORT", "7000")
    assert settings_class().port == 6123


def test_port_can_be_passed_by_name_and_zero_means_ephemeral():
    assert PlannerSettings(port=0).port == 0


def test_otlp_endpoint_prefers_the_standard_otel_variable(monkeypatch):
    monkeypatch.setenv("ATTEST_OTLP_ENDPOINT", "http://attest:4317")
    assert CommonSettings().otlp_endpoint == "http://attest:4317"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317")
    assert CommonSettings().otlp_endpoint == "http://collector:4317"


def test_gateway_addresses_token_and_limits(monkeypatch):
    settings = GatewaySettings()
    assert settings.planner_addr == "127.0.0.1:50051"
    assert settings.executor_addr == "127.0.0.1:50052"
    assert settings.gatekeeper_addr == "127.0.0.1:50053"
    assert settings.verifier_addr == "127.0.0.1:50054"
    assert settings.composer_addr == "127.0.0.1:50055"
    assert settings.auth_token is None
    assert settings.diagnosis_timeout_seconds == 60.0
    assert settings.max_query_chars == 4000

    monkeypatch.setenv("ATTEST_PLANNER_ADDR", "planner.attest.svc:50051")
    monkeypatch.setenv("ATTEST_AUTH_TOKEN", "s3cret")
    settings = GatewaySettings()
    assert settings.planner_addr == "planner.attest.svc:50051"
    assert settings.auth_token == "s3cret"


def test_executor_estate_database(monkeypatch):
    assert ExecutorSettings().estate_database_url == "sqlite:///var/estate.db"
    monkeypatch.setenv("ATTEST_ESTATE_DATABASE_URL", "sqlite:////data/estate.db")
    assert ExecutorSettings().estate_database_url == "sqlite:////data/estate.db"


def test_dotenv_file_is_read_and_environment_wins(tmp_path, monkeypatch):
    (tmp_path / ".env").write_text(
        "ATTEST_DATABASE_URL=sqlite:///from-dotenv.db\nATTEST_VERIFIER_PORT=6001\n"
        "ATTEST_LOG_LEVEL=DEBUG\n"
    )
    settings = VerifierSettings()
    assert settings.database_url == "sqlite:///from-dotenv.db"
    assert settings.port == 6001
    monkeypatch.setenv("ATTEST_LOG_LEVEL", "WARNING")
    assert VerifierSettings().log_level == "WARNING"


def test_invalid_values_are_rejected(monkeypatch):
    monkeypatch.setenv("ATTEST_COMPOSER_PORT", "70000")
    with pytest.raises(ValueError):
        ComposerSettings()


def test_service_addr():
    assert service_addr(GatekeeperSettings()) == "127.0.0.1:50053"
    assert service_addr(GatekeeperSettings(bind_host="0.0.0.0", port=9)) == "0.0.0.0:9"
    assert service_addr(GatekeeperSettings(bind_host="::", port=9)) == "[::]:9"
